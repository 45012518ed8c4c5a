"""Secret input fields in a stored payload: marked or sealed at enqueue, opened for the handler,
`***` for everyone else; input that could be mistaken for an envelope is refused."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pydantic import BaseModel, ConfigDict, JsonValue, Secret, SecretBytes, SecretStr

from ket.declare import build_input_model
from ket.errors import JobRejected, SecretKeyError
from ket.secret import (
    SecretKeys,
    UnopenableSecret,
    clear_secrets,
    holds_secrets,
    open_payload,
    plain_payload,
    redact_payload,
    seal_payload,
)

KEYS = SecretKeys([Fernet.generate_key().decode()])


class Login(BaseModel):
    user: str
    password: SecretStr


class Vault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    account: str
    api_key: SecretStr
    pin: Secret[int]
    login: Login | None = None
    tokens: list[SecretStr] = []
    blob: SecretBytes | None = None
    note: JsonValue = None


VALUE = Vault(
    account="acme",
    api_key=SecretStr("sk-live-1"),
    pin=Secret[int](4321),
    login=Login(user="ann", password=SecretStr("hunter22")),
    tokens=[SecretStr("tok-a1"), SecretStr("tok-b2")],
    blob=SecretBytes(b"bytes-secret"),
)
SECRETS = ["sk-live-1", "4321", "hunter22", "tok-a1", "tok-b2", "bytes-secret"]


def test_without_keys_every_secret_is_stored_in_clear_inside_its_envelope() -> None:
    payload = seal_payload(VALUE, None, job="v.use")
    assert payload == {
        "account": "acme",
        "api_key": {"$secret": "sk-live-1"},
        "pin": {"$secret": 4321},
        "login": {"user": "ann", "password": {"$secret": "hunter22"}},
        "tokens": [{"$secret": "tok-a1"}, {"$secret": "tok-b2"}],
        "blob": {"$secret": "bytes-secret"},
        "note": None,
    }
    assert "**********" not in json.dumps(payload)  # pydantic's mask never replaces a value


def test_with_keys_no_secret_value_is_left_in_the_payload() -> None:
    payload = seal_payload(VALUE, KEYS, job="v.use")
    text = json.dumps(payload)
    assert [secret for secret in SECRETS if secret in text] == []
    assert payload["api_key"].keys() == {"$sealed"}
    assert payload["account"] == "acme"


@pytest.mark.parametrize("keys", [None, KEYS])
def test_an_opened_payload_validates_back_to_the_same_input(keys: SecretKeys | None) -> None:
    opened, found = open_payload(seal_payload(VALUE, keys, job="v.use"), keys)
    again = Vault.model_validate(opened)
    assert again.api_key.get_secret_value() == "sk-live-1"
    assert again.pin.get_secret_value() == 4321
    assert again.login is not None
    assert again.login.password.get_secret_value() == "hunter22"
    assert again.blob is not None
    assert again.blob.get_secret_value() == b"bytes-secret"
    assert sorted(found) == sorted(SECRETS)


def test_a_sealed_payload_without_keys_is_refused_naming_the_field() -> None:
    payload = seal_payload(VALUE, KEYS, job="v.use")
    with pytest.raises(SecretKeyError) as refused:
        open_payload(payload, None)
    assert str(refused.value) == (
        "input field 'api_key' is sealed and KET_SECRET_KEYS is not set to open it"
    )


def test_a_payload_sealed_with_a_removed_key_is_refused_naming_the_field() -> None:
    payload = seal_payload(VALUE, KEYS, job="v.use")
    other = SecretKeys([Fernet.generate_key().decode()])
    with pytest.raises(UnopenableSecret) as refused:
        open_payload(payload, other)
    assert str(refused.value).startswith("input field 'api_key': it opens with none of the 1")


def test_redacting_shows_every_envelope_as_stars_sealed_or_not() -> None:
    for keys in (None, KEYS):
        shown = redact_payload(seal_payload(VALUE, keys, job="v.use"))
        assert shown["api_key"] == shown["pin"] == shown["blob"] == "***"
        assert shown["login"] == {"user": "ann", "password": "***"}
        assert shown["tokens"] == ["***", "***"]
        assert shown["account"] == "acme"


def test_clear_secrets_lists_the_values_held_in_clear_and_none_sealed() -> None:
    assert sorted(clear_secrets(seal_payload(VALUE, None, job="v.use"))) == sorted(SECRETS)
    assert list(clear_secrets(seal_payload(VALUE, KEYS, job="v.use"))) == []


@pytest.mark.parametrize("marker", ["$secret", "$sealed"])
def test_input_shaped_like_an_envelope_is_refused_naming_the_field(marker: str) -> None:
    value = VALUE.model_copy(update={"note": {"inner": [{marker: "forged"}]}})
    with pytest.raises(JobRejected) as refused:
        seal_payload(value, None, job="v.use")
    assert str(refused.value) == (
        f"job 'v.use': input field 'note.inner[0]' holds an object whose single key is "
        f"{marker!r}, which ket reserves for secret fields"
    )
    plain = build_input_model({"meta": "json"}, "t").model_validate({"meta": {marker: "x"}})
    with pytest.raises(JobRejected, match="input field 'meta' holds an object"):
        plain_payload(plain, job="t.plain")


def test_an_object_with_the_marker_among_other_keys_is_ordinary_input() -> None:
    model = build_input_model({"meta": "json"}, "t")
    payload = plain_payload(model.model_validate({"meta": {"$secret": 1, "b": 2}}), job="t")
    assert payload == {"meta": {"$secret": 1, "b": 2}}
    assert open_payload(payload, None) == (payload, [])


def test_secret_bytes_that_are_not_utf8_are_refused_without_the_value() -> None:
    value = VALUE.model_copy(update={"blob": SecretBytes(b"\xff\xfe-raw")})
    with pytest.raises(JobRejected) as refused:
        seal_payload(value, None, job="v.use")
    assert str(refused.value) == (
        "job 'v.use': input field 'blob' is secret bytes that are not UTF-8 text"
    )


def test_a_field_that_is_no_longer_secret_still_opens_from_old_rows() -> None:
    old_row = seal_payload(VALUE, KEYS, job="v.use")
    opened, _ = open_payload(old_row, KEYS)
    assert build_input_model({"api_key": "string"}, "t").model_validate(
        {"api_key": opened["api_key"]}
    ).model_dump() == {"api_key": "sk-live-1"}


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (Vault, True),
        (Login, True),
        (build_input_model({"api_key": "secret?"}, "t"), True),
        (build_input_model({"n": "int", "meta": "json"}, "t"), False),
    ],
)
def test_holds_secrets_finds_secret_fields_however_deep(model: Any, expected: bool) -> None:
    assert holds_secrets(model) is expected


def test_holds_secrets_finds_a_generic_secret_the_json_schema_does_not_mark() -> None:
    class Pin(BaseModel):
        pins: dict[str, list[Secret[int]]]

    assert "writeOnly" not in json.dumps(Pin.model_json_schema())
    assert holds_secrets(Pin) is True
