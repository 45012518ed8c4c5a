"""Secret input fields in a stored payload: marked or sealed when a job is enqueued, opened only
when its handler's input is built, shown as `***` everywhere else.

A secret field (pydantic `SecretStr`, `SecretBytes` or `Secret[...]`; the input shorthand
`secret`) is stored as a one-key object, an *envelope*, in place of its value:

    {"api_key": {"$secret": "sk-live-..."}}      without KET_SECRET_KEYS: in clear, but marked
    {"api_key": {"$sealed": "gAAAAAB..."}}       sealed with the first key of KET_SECRET_KEYS

So a stored payload says by itself which of its values are secret, and any tool can redact it
without the deployment. Input holding an envelope-shaped object outside a secret field is refused
at enqueue time, so every envelope in a stored payload is one ket wrote.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args, get_origin

from pydantic import BaseModel, Secret, SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

from ket.errors import JobRejected, SecretKeyError
from ket.secret.key import KEYS_VARIABLE, SecretKeys

CLEAR = "$secret"
SEALED = "$sealed"
REDACTED = "***"
SECRET_TYPES = (Secret, SecretStr, SecretBytes)
_MARKERS = frozenset({CLEAR, SEALED})
_SEQUENCES = (list, tuple, set, frozenset)
_NESTED = (dict, list)
_RESERVED = "holds an object whose single key is {key!r}, which ket reserves for secret fields"


def holds_secrets(model: type[BaseModel]) -> bool:
    """Whether instances of `model` may carry a secret value anywhere (nested models, lists,
    dicts and optionals included)."""
    if _type_holds(model, set()):
        return True
    # SecretStr and SecretBytes also say writeOnly in the JSON schema, wherever they hide (a
    # TypedDict, a dataclass), where the walk of annotations does not look
    try:
        schema = json.dumps(model.model_json_schema())
    except Exception:  # a model with no JSON schema: what its annotations said is all we know
        return False
    return '"writeOnly": true' in schema


def seal_payload(value: BaseModel, keys: SecretKeys | None, *, job: str) -> dict[str, Any]:
    """The JSON payload of a validated input, each secret value in its envelope (sealed when
    `keys` are given); JobRejected, naming the field, for input ket cannot store safely."""
    shown = value.model_dump(mode="json")  # secrets come out as "**********" here
    kept = value.model_dump(mode="python")  # and as Secret objects here, at the same places
    sealed: dict[str, Any] = _seal(shown, kept, keys, _Where(job, ""))
    return sealed


def plain_payload(value: BaseModel, *, job: str) -> dict[str, Any]:
    """The JSON payload of a validated input that holds no secret field; JobRejected, naming
    the field, for an envelope-shaped object in it."""
    shown: dict[str, Any] = value.model_dump(mode="json")
    return _no_envelopes(shown, job)


def plain_payloads(shown: list[dict[str, Any]], *, job: str) -> list[dict[str, Any]]:
    """plain_payload for inputs validated and dumped together (a TypeAdapter over their list):
    the same refusal of an envelope-shaped object, naming the field."""
    for payload in shown:
        _no_envelopes(payload, job)
    return shown


def _no_envelopes(shown: dict[str, Any], job: str) -> dict[str, Any]:
    if _is_envelope(shown) or not _flat(shown):  # most payloads are flat: nothing to walk
        _refuse_envelopes(shown, _Where(job, ""))
    return shown


def open_payload(
    payload: dict[str, Any], keys: SecretKeys | None
) -> tuple[dict[str, Any], list[str]]:
    """The payload with every envelope replaced by its value, and the secret texts it held
    (for hiding them in error texts). SecretKeyError, naming the field, when a sealed value
    cannot be opened."""
    if not _is_envelope(payload) and _flat(payload):  # most payloads are: nothing to open
        return payload, []
    found: list[str] = []
    opened: dict[str, Any] = _open(payload, keys, "", found)
    return opened, found


def redact_payload(payload: Any) -> Any:
    """The payload with every secret value, sealed or not, shown as `***`."""
    if isinstance(payload, dict):
        if _is_envelope(payload):
            return REDACTED
        return {key: redact_payload(value) for key, value in payload.items()}
    if isinstance(payload, list):
        return [redact_payload(value) for value in payload]
    return payload


def clear_secrets(payload: Any) -> Iterator[str]:
    """The texts of the secrets a payload holds in clear (sealed ones stay sealed)."""
    if isinstance(payload, dict):
        if _is_envelope(payload):
            if CLEAR in payload:
                yield from _texts(payload[CLEAR])
            return
        for value in payload.values():
            yield from clear_secrets(value)
    elif isinstance(payload, list):
        for value in payload:
            yield from clear_secrets(value)


# -- sealing --------------------------------------------------------------------------------


class _Where:
    """Where in a job's input the walk is, for messages: `api_key`, `creds.password`, `keys[2]`."""

    def __init__(self, job: str, path: str) -> None:
        self.job, self.path = job, path

    def key(self, name: object) -> _Where:
        return _Where(self.job, f"{self.path}.{name}" if self.path else str(name))

    def index(self, position: int) -> _Where:
        return _Where(self.job, f"{self.path}[{position}]")

    def refuse(self, problem: str) -> JobRejected:
        return JobRejected(f"job {self.job!r}: input field {self.path or 'input'!r} {problem}")


def _seal(shown: Any, kept: Any, keys: SecretKeys | None, where: _Where) -> Any:
    if isinstance(kept, SECRET_TYPES):
        return _envelope(kept.get_secret_value(), keys, where)
    if isinstance(shown, dict) and isinstance(kept, dict) and len(kept) == len(shown):
        if _is_envelope(shown):
            raise where.refuse(_RESERVED.format(key=next(iter(shown))))
        return {
            key: _seal(value, kept_value, keys, where.key(key))
            for (key, value), kept_value in zip(shown.items(), kept.values(), strict=True)
        }
    if isinstance(shown, list) and isinstance(kept, _SEQUENCES) and len(kept) == len(shown):
        return [
            _seal(value, kept_value, keys, where.index(position))
            for position, (value, kept_value) in enumerate(zip(shown, kept, strict=True))
        ]
    # A leaf, or a JSON form that does not mirror the Python one (a custom serializer): fine
    # unless a secret hides inside, whose value could then not be stored.
    if _has_secret(kept):
        raise where.refuse("holds a secret ket cannot find in its JSON form (custom serializer?)")
    _refuse_envelopes(shown, where)
    return shown


def _envelope(value: object, keys: SecretKeys | None, where: _Where) -> dict[str, Any]:
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise where.refuse("is secret bytes that are not UTF-8 text") from None
    data = to_jsonable_python(value)
    if keys is None:
        return {CLEAR: data}
    return {SEALED: keys.seal(json.dumps(data, ensure_ascii=False))}


def _has_secret(kept: Any) -> bool:
    if isinstance(kept, SECRET_TYPES):
        return True
    if isinstance(kept, dict):
        return any(_has_secret(value) for value in kept.values())
    if isinstance(kept, _SEQUENCES):
        return any(_has_secret(value) for value in kept)
    return False


def _refuse_envelopes(shown: Any, where: _Where) -> None:
    if isinstance(shown, dict):
        if _is_envelope(shown):
            raise where.refuse(_RESERVED.format(key=next(iter(shown))))
        for key, value in shown.items():
            if isinstance(value, dict | list):  # the leaves of a payload are most of it
                _refuse_envelopes(value, where.key(key))
    elif isinstance(shown, list):
        for position, value in enumerate(shown):
            if isinstance(value, dict | list):
                _refuse_envelopes(value, where.index(position))


def _type_holds(annotation: Any, seen: set[type]) -> bool:
    if isinstance(annotation, type):
        if issubclass(annotation, SECRET_TYPES):
            return True
        if issubclass(annotation, BaseModel):
            if annotation in seen:
                return False
            seen.add(annotation)
            return any(_type_holds(f.annotation, seen) for f in annotation.model_fields.values())
    origin = get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, SECRET_TYPES):
        return True
    return any(_type_holds(argument, seen) for argument in get_args(annotation))


# -- opening --------------------------------------------------------------------------------


def _open(value: Any, keys: SecretKeys | None, path: str, found: list[str]) -> Any:
    if isinstance(value, dict):
        if _is_envelope(value):
            secret = _opened(value, keys, path or "input")
            found.extend(_texts(secret))
            return secret
        return {
            key: _open(item, keys, f"{path}.{key}" if path else str(key), found)
            if isinstance(item, dict | list)  # the leaves of a payload are most of it
            else item
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _open(item, keys, f"{path}[{i}]", found) if isinstance(item, dict | list) else item
            for i, item in enumerate(value)
        ]
    return value


def _opened(envelope: dict[str, Any], keys: SecretKeys | None, path: str) -> Any:
    if CLEAR in envelope:
        return envelope[CLEAR]
    token = envelope[SEALED]
    if keys is None:
        raise SecretKeyError(
            f"input field {path!r} is sealed and {KEYS_VARIABLE} is not set to open it"
        )
    if not isinstance(token, str):
        raise SecretKeyError(f"input field {path!r} holds a sealed value that is not a token")
    try:
        return json.loads(keys.open(token))
    except SecretKeyError as error:
        raise type(error)(f"input field {path!r}: {error.message}") from None
    except ValueError:
        raise SecretKeyError(f"input field {path!r} opens to text that is not JSON") from None


def _flat(payload: dict[str, Any]) -> bool:
    """Whether no value of `payload` is an object or an array (a plain loop: this runs for
    every job enqueued and every job run)."""
    for value in payload.values():  # noqa: SIM110 (a generator costs twice as much here)
        if isinstance(value, _NESTED):
            return False
    return True


def _is_envelope(value: dict[Any, Any]) -> bool:
    return len(value) == 1 and next(iter(value)) in _MARKERS


def _texts(secret: object) -> Iterator[str]:
    """The texts of a secret value worth hiding in an error text: a string, a number's digits."""
    if isinstance(secret, str):
        yield secret
    elif isinstance(secret, int | float) and not isinstance(secret, bool):
        yield str(secret)
