"""A request the server answers with an error: its status, a stable code and a message.

Every error body has one shape, `{"error": CODE, "message": TEXT}` (422 adds `detail`, the
input's field errors), so clients branch on `error` and show `message`. No body carries a
traceback or the text of what a function raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

# status -> the code of Starlette's own refusals (an unknown path, a wrong method)
_CODES = {404: "not_found", 405: "method_not_allowed"}


class Refusal(Exception):
    """The request is refused with `status`; `code` is stable, `message` for people."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        detail: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.detail = detail
        self.headers = dict(headers or {})

    def response(self) -> Response:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.detail is not None:
            body["detail"] = self.detail
        return json_response(body, self.status, self.headers)


def json_response(
    value: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """`value` (already JSON data) as a compact JSON response, non-ASCII escaped."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return Response(text, status, headers=headers, media_type="application/json")


async def on_refusal(request: Request, error: Exception) -> Response:
    """Starlette's handler for a Refusal raised anywhere under the app."""
    assert isinstance(error, Refusal)
    return error.response()


async def on_http_exception(request: Request, error: Exception) -> Response:
    """Starlette's own refusals (no such path, a wrong method) in the same JSON shape."""
    assert isinstance(error, HTTPException)
    code = _CODES.get(error.status_code, "refused")
    return Refusal(error.status_code, code, error.detail, headers=error.headers).response()
