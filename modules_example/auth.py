"""Who may call the erp functions over HTTP (`ket serve`) and use its dashboard: whoever sends
the token in ERP_API_TOKEN as `Authorization: Bearer <token>`, or signs in to the dashboard with
it. Unset, nobody may."""

from __future__ import annotations

import hmac
import os

from ket.serve import AuthRequest, Principal


async def authenticate(request: AuthRequest) -> Principal | None:
    """The API client, for the right token; None (401) for any other request."""
    expected = os.environ.get("ERP_API_TOKEN", "")
    token = request.bearer_token()
    if not expected or token is None:
        return None
    if not hmac.compare_digest(token.encode(), expected.encode()):  # in constant time
        return None
    # call every function; read the dashboard, and retry or cancel jobs there
    return Principal(subject="erp-api", permissions={"call:*", "jobs:read", "jobs:write"})
