"""A request body as a function's input: at most `max_body_bytes`, JSON, an object.

The cap holds whether or not the client sends Content-Length (a chunked body is counted as it
arrives and refused the moment it passes the cap), so no request makes the server hold more
than the cap in memory. The nesting guard of `ket call` applies too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request

from ket.runtime.call import MAX_INPUT_DEPTH, json_depth
from ket.serve.refusal import Refusal

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True, kw_only=True, slots=True)
class Body:
    """A request's JSON object: as sent, and parsed."""

    text: str
    value: dict[str, Any]


async def read_input(request: Request, cap: int) -> Body:
    """The JSON object of the request's body; Refusal (413, 415, 400, 422) saying what is
    wrong with it. An empty body is the empty object."""
    # Required even for an empty body: a browser sends application/json across sites only after
    # a CORS preflight (which this server does not answer), so no other site's page can make a
    # visitor's browser call a function with the visitor's cookies.
    kind = request.headers.get("content-type", "")
    if kind.split(";", 1)[0].strip().lower() != "application/json":
        raise Refusal(
            415, "unsupported_media_type", "send the input with Content-Type: application/json"
        )
    raw = await _read(request, cap)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise Refusal(400, "bad_json", f"the body is not UTF-8 (byte {error.start})") from None
    depth = json_depth(text)
    if depth > MAX_INPUT_DEPTH:
        raise Refusal(
            400, "bad_json", f"the body is nested {depth} levels deep, more than {MAX_INPUT_DEPTH}"
        )
    if not text.strip():
        return Body(text="{}", value={})
    try:
        value = json.loads(text, parse_float=_Written, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise Refusal(
            400,
            "bad_json",
            f"the body is not valid JSON ({error.msg} at line {error.lineno} column {error.colno})",
        ) from None
    except (ValueError, RecursionError) as error:  # a number of more than 4,300 digits
        raise Refusal(400, "bad_json", f"the body is not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise Refusal(
            422,
            "invalid_input",
            "the input must be a JSON object",
            detail=[{"loc": [], "msg": "Input should be an object", "type": "model_type"}],
        )
    return Body(text=text, value=value)


def validate_input(model: type[ModelT], body: Body) -> ModelT:
    """The body as `model`, strictly; a number without a fraction (`4.0`, `1e3`) is read as an
    integer where the model wants one, as JSON Schema counts it, and as written elsewhere."""
    try:
        return model.model_validate_json(body.text, strict=True)
    except ValidationError as error:
        # strict pydantic refuses 4.0 for an int: give it the exact integer at those places
        # alone, so a float or an Any field still gets 4.0 and 1e23 stays 10**23
        if not _integral_where_int(error, body.value):
            raise
    return model.model_validate_json(_dump(body.value), strict=True)


class _Written(float):
    """A JSON number with a fraction or exponent, and its text as sent (`1e23` is exactly
    10**23, which the float is not)."""

    text: str

    def __new__(cls, text: str) -> _Written:
        number = super().__new__(cls, text)
        if math.isinf(number):
            raise ValueError(f"number {text[:40]!r} is out of range")
        number.text = text
        return number


def _integral_where_int(error: ValidationError, value: dict[str, Any]) -> bool:
    """Turn each number pydantic refused for an int field, having no fraction, into that
    integer in `value`; whether any was."""
    mended = False
    for problem in error.errors():
        if problem["type"] != "int_type":
            continue
        parent, key = _locate(value, problem["loc"])
        if parent is None:
            continue
        number = parent[key]
        if isinstance(number, _Written) and number.is_integer():
            # finite, so at most 309 digits
            parent[key] = int(Decimal(number.text))
            mended = True
    return mended


def _locate(
    value: Any, loc: tuple[int | str, ...]
) -> tuple[dict[str, Any] | list[Any] | None, Any]:
    """The container and key holding the value at pydantic's `loc`; a step naming no key (a
    union member's tag, like `int`) is passed over."""
    parent: dict[str, Any] | list[Any] | None = None
    key: Any = None
    for step in loc:
        if _holds(value, step):
            parent, key, value = value, step, value[step]
    return parent, key


def _holds(value: Any, step: int | str) -> bool:
    if isinstance(value, dict):
        return isinstance(step, str) and step in value
    return isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value)


def _dump(value: Any) -> str:
    """`value` as JSON, each number sent with a fraction or exponent written as it was sent."""
    if isinstance(value, _Written):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(item) for item in value) + "]"
    return json.dumps(value)


def _no_constant(text: str) -> None:
    raise ValueError(f"{text} is not JSON")


async def _read(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise _too_large(cap)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > cap:
                raise _too_large(cap)
            chunks.append(chunk)
    except ClientDisconnect:
        raise Refusal(400, "disconnected", "the client went away mid-body") from None
    return b"".join(chunks)


def _too_large(cap: int) -> Refusal:
    return Refusal(413, "body_too_large", f"the body is larger than {cap} bytes")
