"""Who may call the erp functions over HTTP (`ket serve`) and use its dashboard, and in which
tenants: whoever sends the token in ERP_API_TOKEN as `Authorization: Bearer <token>`, or signs
in to the dashboard with it, in the tenants ERP_API_TENANTS names (comma-separated; `*` for
every tenant; unset, the `default` tenant alone). With no token set, nobody may.

The tenant is part of the decision: `request.tenant` is the tenant a request names (the
`X-Ket-Tenant` header), and a token that reaches every tenant is a choice made in the open
(`ERP_API_TENANTS=*`), never the default of code copied into a multi-tenant app."""

from __future__ import annotations

import hmac
import os

from ket.serve import AuthRequest, Principal

EVERY_TENANT = "*"


def tenants_reached() -> frozenset[str]:
    """The tenants ERP_API_TENANTS names (`*`: every tenant); `default` when it is unset."""
    named = os.environ.get("ERP_API_TENANTS", "default")
    return frozenset(name.strip() for name in named.split(",") if name.strip())


async def authenticate(request: AuthRequest) -> Principal | None:
    """The API client, for the right token in a tenant it reaches; None (401) for any other
    request."""
    expected = os.environ.get("ERP_API_TOKEN", "")
    token = request.bearer_token()
    if not expected or token is None:
        return None
    if not hmac.compare_digest(token.encode(), expected.encode()):  # in constant time
        return None
    reached = tenants_reached()
    if EVERY_TENANT not in reached and request.tenant not in reached:
        return None  # the right token, for another tenant
    # call every function; read the dashboard, retry or cancel jobs and pause queues there (and
    # through the operator API)
    return Principal(
        subject="erp-api", permissions={"call:*", "jobs:read", "jobs:write", "queues:write"}
    )
