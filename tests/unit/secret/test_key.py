"""KET_SECRET_KEYS: Fernet keys newest first; seal with the first, open with any; no message
ever quotes a key."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from ket.errors import SecretKeyError
from ket.secret import SecretKeys, UnopenableSecret, generate_key

A, B = Fernet.generate_key().decode(), Fernet.generate_key().decode()


def test_no_keys_when_the_variable_is_unset_or_blank() -> None:
    assert SecretKeys.from_environment({}) is None
    assert SecretKeys.from_environment({"KET_SECRET_KEYS": "  "}) is None


def test_new_secrets_are_sealed_with_the_first_key_and_open_with_any() -> None:
    rotated = SecretKeys.from_environment({"KET_SECRET_KEYS": f"{B}, {A}"})
    assert rotated is not None
    token = rotated.seal("sk-live-1")
    assert "sk-live-1" not in token
    assert Fernet(B.encode()).decrypt(token.encode()) == b"sk-live-1"  # the newest key sealed it
    old = SecretKeys([A]).seal("sk-live-0")
    assert rotated.open(old) == "sk-live-0"  # and an older one still opens


def test_a_token_no_key_opens_is_refused_naming_the_key_count_not_the_token() -> None:
    token = SecretKeys([A]).seal("sk-live-0")
    with pytest.raises(UnopenableSecret) as refused:
        SecretKeys([B]).open(token)
    assert str(refused.value) == (
        "it opens with none of the 1 keys in KET_SECRET_KEYS; was the key that sealed it removed?"
    )
    assert token not in str(refused.value)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("not-a-key", "key 1 of 1 is not a Fernet key"),
        (f"{A},short", "key 2 of 2 is not a Fernet key"),
        (" , ", "key 1 of 1 is not a Fernet key"),
    ],
    ids=["not-a-key", "second-short", "blank"],  # the keys are random: ids name the cases
)
def test_a_malformed_key_is_named_by_position_never_quoted(text: str, problem: str) -> None:
    with pytest.raises(SecretKeyError) as refused:
        SecretKeys.from_environment({"KET_SECRET_KEYS": text})
    assert str(refused.value).startswith(f"KET_SECRET_KEYS: {problem} (32 url-safe")
    assert "not-a-key" not in str(refused.value)
    assert "short" not in str(refused.value)
    assert A not in str(refused.value)


def test_empty_entries_between_commas_are_skipped() -> None:
    keys = SecretKeys.from_environment({"KET_SECRET_KEYS": f"{A},,"})
    assert keys is not None
    assert keys.count == 1


def test_keys_never_show_in_their_repr() -> None:
    keys = SecretKeys([A, B])
    assert repr(keys) == "SecretKeys(2 keys)"


def test_a_generated_key_is_a_working_fernet_key() -> None:
    key = generate_key()
    assert SecretKeys([key]).open(SecretKeys([key]).seal("x")) == "x"
