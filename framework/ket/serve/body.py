"""A request body as a function's input: at most `max_body_bytes`, JSON, an object.

The cap holds whether or not the client sends Content-Length (a chunked body is counted as it
arrives and refused the moment it passes the cap), so no request makes the server hold more
than the cap in memory. The nesting guard of `ket call` applies too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import ClientDisconnect, Request

from ket.runtime.call import MAX_INPUT_DEPTH, json_depth
from ket.serve.refusal import Refusal


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
    integral: list[bool] = []
    try:
        value = json.loads(text, parse_float=_number(integral), parse_constant=_no_constant)
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
    # a float with no fraction became an int: validate what was read, not what was sent
    return Body(text=json.dumps(value) if integral else text, value=value)


def _number(integral: list[bool]) -> Callable[[str], float | int]:
    """How to read a JSON number with a fraction or exponent: `43.0` and `1e3` as ints, as JSON
    Schema counts them (strict pydantic would refuse them for an int field); `integral` is
    marked when one is met."""

    def number(text: str) -> float | int:
        value = float(text)
        if math.isinf(value):
            raise ValueError(f"number {text[:40]!r} is out of range")
        if value.is_integer():
            integral.append(True)
            return int(value)
        return value

    return number


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
