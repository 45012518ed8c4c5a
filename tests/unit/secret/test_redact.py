"""Error texts without an attempt's secret values, then through the deployment's hook."""

from __future__ import annotations

import json

import pytest

from ket.secret import RedactionFailed, Redactor


def test_secret_values_are_hidden_also_as_repr_and_json_escape_them() -> None:
    secret = "it's-s3cret\n\u00e9"
    text = f"raw {secret}, repr {secret!r}, ascii {secret!a}, json {json.dumps(secret)}"
    assert Redactor.of([secret])(text) == 'raw ***, repr "***", ascii "***", json "***"'


def test_a_secret_containing_another_is_hidden_whole() -> None:
    redact = Redactor.of(["abcd", "abcdefgh"])
    assert redact("key abcdefgh") == "key ***"


def test_secrets_shorter_than_four_characters_are_left_alone() -> None:
    assert Redactor.of(["ab1"])("tab1e and ab1") == "tab1e and ab1"


def test_the_hook_runs_after_the_secret_values_are_hidden() -> None:
    given: list[str] = []

    def hook(text: str) -> str:
        given.append(text)
        return text.replace("4111-1111", "<card>")

    redact = Redactor.of(["sk-live-9"], hook)
    assert redact("key sk-live-9 card 4111-1111") == "key *** card <card>"
    assert given == ["key *** card 4111-1111"]


@pytest.mark.parametrize("hook", [lambda text: 1 / 0, lambda text: None])
def test_a_failing_hook_raises_redaction_failed_without_the_text(hook: object) -> None:
    redact = Redactor.of([], hook)  # type: ignore[arg-type]
    with pytest.raises(RedactionFailed) as failed:
        redact("card 4111-1111")
    assert "4111" not in str(failed.value)
    assert failed.value.__cause__ is None
