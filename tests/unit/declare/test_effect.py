"""The effect grammar: six forms accepted, everything else refused with the text named."""

from __future__ import annotations

from typing import Any

import pytest

from ket.declare import Effect, parse_effect
from ket.errors import DeclarationError, EffectSyntaxError


@pytest.mark.parametrize(
    ("text", "verb", "target", "module", "name"),
    [
        ("read:sales.Order", "read", "sales.Order", "sales", "Order"),
        ("write:sales.Order", "write", "sales.Order", "sales", "Order"),
        (
            "enqueue:sales.send_confirmation",
            "enqueue",
            "sales.send_confirmation",
            "sales",
            "send_confirmation",
        ),
        ("storage:read", "storage", "read", None, None),
        ("storage:write", "storage", "write", None, None),
        ("transport:send", "transport", "send", None, None),
    ],
)
def test_parse_effect_accepts_the_six_forms(
    text: str, verb: str, target: str, module: str | None, name: str | None
) -> None:
    effect = parse_effect(text)
    assert effect == Effect(verb=verb, target=target)  # type: ignore[arg-type]
    assert (effect.module, effect.name) == (module, name)
    assert effect.text == str(effect) == text


@pytest.mark.parametrize(
    "text",
    [
        "read:sales",
        "read:sales.",
        "read:.Order",
        "read:Sales.Order",
        "read:sales.Order.id",
        "read:sales.1Order",
        "write:sales",
        "enqueue:sales.Send",
        "enqueue:sales.send-mail",
        "delete:sales.Order",
        "Read:sales.Order",
        "storage:delete",
        "storage:",
        "transport:receive",
        "transport",
        "read sales.Order",
        "",
    ],
)
def test_parse_effect_refuses_bad_text_naming_it(text: str) -> None:
    with pytest.raises(EffectSyntaxError) as raised:
        parse_effect(text)
    assert repr(text) in raised.value.message


@pytest.mark.parametrize("value", [42, None, b"read:sales.Order", ["read:sales.Order"]])
def test_parse_effect_refuses_non_strings_naming_the_value(value: Any) -> None:
    with pytest.raises(EffectSyntaxError) as raised:
        parse_effect(value)
    assert raised.value.message == (
        f"effect must be a string such as 'read:sales.Order', got {value!r}"
    )


def test_unknown_kind_lists_the_grammar() -> None:
    with pytest.raises(EffectSyntaxError) as raised:
        parse_effect("delete:sales.Order")
    assert raised.value.message == (
        "effect 'delete:sales.Order' has unknown kind 'delete'; expected one of "
        "read:<module>.<Model>, write:<module>.<Model>, enqueue:<module>.<job>, "
        "storage:read, storage:write or transport:send"
    )


def test_enqueue_target_is_described_as_a_job() -> None:
    with pytest.raises(EffectSyntaxError, match=r"enqueue:<module>\.<job>"):
        parse_effect("enqueue:sales")


def test_effect_syntax_error_is_a_declaration_error() -> None:
    with pytest.raises(DeclarationError):
        parse_effect("storage:delete")


def test_effects_sort_by_verb_then_target() -> None:
    texts = ["write:a.B", "read:b.A", "read:a.Z", "enqueue:a.x"]
    assert [e.text for e in sorted(map(parse_effect, texts))] == [
        "enqueue:a.x",
        "read:a.Z",
        "read:b.A",
        "write:a.B",
    ]
