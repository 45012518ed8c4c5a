"""How a deployment's functions are served over HTTP by `ket serve`: who may call them, and limits.

Kept apart from the server itself (`ket.serve`), which needs Starlette: declaring and checking a
deployment never imports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_MAX_BODY_BYTES = 1_048_576  # 1 MiB
DEFAULT_SHUTDOWN_GRACE_MS = 10_000
# A request body past this is no function input: a typo (an extra zero) or a denial of service.
MAX_BODY_BYTES_LIMIT = 1_073_741_824  # 1 GiB
BEARER: dict[str, Any] = {"type": "http", "scheme": "bearer"}
SECURITY_TYPES = ("http", "apiKey", "oauth2", "openIdConnect", "mutualTLS")
TENANT = "{tenant}"
_HOST_CHARACTERS = re.compile(r"[a-z0-9.\-]*")
DEFAULT_DASHBOARD = "/dashboard"
# one or more lowercase segments; never the functions' or the OpenAPI document's paths
_DASHBOARD_PATH = re.compile(r"(/[a-z0-9][a-z0-9_-]{0,62}){1,5}")
_TAKEN_PATHS = ("/functions", "/openapi.json")


class ServeConfig(BaseModel):
    """The `serve={...}` of a deployment, validated.

    `authenticate(request) -> Principal | None` (sync or async) decides who calls; without it the
    server serves nobody. `tenant_host`, e.g. `"{tenant}.erp.example.com"`, maps a request's host
    to its tenant. `dashboard` is the path the dashboard is mounted at (None: not mounted).
    """

    # strict: a declared value is Python, so True or "50" is a mistake, not a 1 or a 50
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    authenticate: Callable[..., Any] | None = None
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, gt=0, le=MAX_BODY_BYTES_LIMIT)
    tenant_host: str | None = None
    shutdown_grace_ms: int = Field(default=DEFAULT_SHUTDOWN_GRACE_MS, ge=0)
    # the OpenAPI security scheme the authenticator expects; a bearer token by default
    security_scheme: dict[str, Any] = Field(default_factory=lambda: dict(BEARER))
    # where the dashboard is mounted; None: no dashboard
    dashboard: str | None = DEFAULT_DASHBOARD

    @field_validator("dashboard")
    @classmethod
    def _dashboard_path(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _DASHBOARD_PATH.fullmatch(value) or value.startswith(_TAKEN_PATHS):
            raise ValueError(
                "must be a path of 1 to 5 lowercase segments such as '/dashboard' or "
                "'/ops/jobs' (letters, digits, '_' and '-'; no trailing '/'), outside "
                f"/functions and /openapi.json, or None for no dashboard; got {value!r}"
            )
        return value

    @field_validator("tenant_host")
    @classmethod
    def _one_tenant_in_a_host(cls, value: str | None) -> str | None:
        if value is None:
            return None
        rest = value.split(TENANT)
        if len(rest) != 2 or not all(_HOST_CHARACTERS.fullmatch(part) for part in rest):
            raise ValueError(
                "must be a lowercase host name with {tenant} standing once in it, e.g. "
                f"'{{tenant}}.erp.example.com', got {value!r}"
            )
        return value

    @field_validator("security_scheme")
    @classmethod
    def _known_security_type(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") not in SECURITY_TYPES:
            raise ValueError(
                f"must be an OpenAPI security scheme whose type is one of "
                f"{', '.join(SECURITY_TYPES)}, got {value!r}"
            )
        return value

    def host_pattern(self) -> re.Pattern[str] | None:
        """The regular expression a host matches when it names a tenant (group `tenant`)."""
        if self.tenant_host is None:
            return None
        before, after = self.tenant_host.split(TENANT)
        return re.compile(
            f"{re.escape(before)}(?P<tenant>[a-z][a-z0-9_-]{{0,62}}){re.escape(after)}"
        )
