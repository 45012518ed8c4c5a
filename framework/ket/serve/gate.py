"""Who is calling, for which tenant: every route of the server is admitted here first.

The order is fixed, and each step refuses before the next runs: the tenant the request names
(400), the authenticator (401), whether that tenant is served (404, 503), then the permission
the route needs (403). Authentication comes before the registry is consulted, so only an
authenticated caller learns which tenants exist. Without an
authenticator every request is refused (401): the server never serves anonymously. An
authenticator that raises, or returns something other than a Principal or None, refuses the
request too (500, logged): a broken authenticator grants nothing. What it raised is logged as a
function's failure is, with the request's credentials hidden: its message may quote the token
it was given. The same failure is logged once a minute at most, and then the count of those
not logged: a flood of requests with a cookie that makes it raise costs a line a minute. A client
whose credentials (an Authorization header, the dashboard's token) the authenticator refused many
times waits, refused with 429, before it is asked again (serve/throttle.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from ket.declare.serve import ServeConfig
from ket.runtime.outcome import describe, trace_of
from ket.runtime.supervisor import Repeats
from ket.secret import Redact, Redactor
from ket.serve.principal import AuthRequest, Principal
from ket.serve.refusal import Refusal
from ket.serve.tenant import TenantLookup
from ket.serve.throttle import Throttle

log = logging.getLogger("ket.serve")

AUTHENTICATOR = "the authenticator"  # how the rate-limited log names it


@dataclass(frozen=True, kw_only=True, slots=True)
class Caller:
    """An admitted request: its tenant, that tenant's database, and the principal."""

    tenant: str
    url: str
    principal: Principal


class Gate:
    """Admits requests: tenant, authentication, permission."""

    def __init__(
        self,
        config: ServeConfig,
        tenants: TenantLookup,
        redact: Redact | None = None,
        repeats: Repeats | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self._authenticate: Callable[..., Any] | None = config.authenticate
        self._throttle = throttle or Throttle()
        self._redact = redact  # the deployment's hook, applied to what the authenticator raised
        # the same failure of the authenticator is logged once a minute, with a count after
        self._repeats = repeats or Repeats(log)
        self._async = self._authenticate is not None and _is_async(self._authenticate)
        self._tenants = tenants
        self._challenge = _challenge(config.security_scheme)

    async def admit(
        self,
        request: Request,
        permission: str | None = None,
        *,
        tenant: str | None = None,
        token: str | None = None,
    ) -> Caller:
        """The caller of `request`, holding `permission` if one is named; Refusal otherwise.
        The dashboard passes the `tenant` its path names and the `token` its sign-in cookie
        holds."""
        name = await self._tenants.name_of(request.headers, tenant)
        principal = await self.principal(request, name, token=token)
        url = await self._tenants.url_of(name)
        caller = Caller(tenant=name, url=url, principal=principal)
        if permission is not None:
            self.require(caller, permission)
        return caller

    @staticmethod
    def require(caller: Caller, permission: str) -> None:
        """Refusal (403) unless the caller's principal holds `permission`."""
        if not caller.principal.allows(permission):
            subject = caller.principal.subject
            raise Refusal(
                403, "forbidden", f"{subject!r} does not hold the {permission} permission"
            )

    async def principal(
        self, request: Request, tenant: str, *, token: str | None = None
    ) -> Principal:
        """Who `request` acts for in `tenant`, as the authenticator says; Refusal (401, 500)."""
        authenticate = self._authenticate
        if authenticate is None:
            raise Refusal(
                401,
                "unauthenticated",
                "this deployment declares no authenticator, so the server serves nobody; "
                'declare serve={"authenticate": ...} in define_deployment',
                headers=self._challenge,
            )
        client = request.client.host if request.client else None
        asked = AuthRequest(
            tenant=tenant,
            method=request.method,
            path=request.scope["path"],
            headers=request.headers,
            client=client,
            dashboard_token=token,
        )
        presented = _presented(asked)
        if presented:  # a client that guessed too often waits before it is asked about more
            self._throttle.check(client)
        try:
            if self._async:
                answer = await authenticate(asked)
            else:  # it may read a database or a file: off the event loop
                answer = await asyncio.to_thread(authenticate, asked)
        except Exception as error:
            hidden = Redactor.of(_credentials(asked), self._redact)
            said = describe(error, hidden)
            if self._repeats.due(AUTHENTICATOR, said):  # keyed on the text with no secret
                log.error(
                    "the authenticator raised; the request is refused: %s\n%s",
                    said,
                    trace_of(error, hidden),
                )
            raise Refusal(500, "authentication_failed", "authentication failed") from None
        if answer is None:
            if presented:  # a guess; a page opened without credentials is none
                self._throttle.failed(client)
            raise Refusal(401, "unauthenticated", "not authenticated", headers=self._challenge)
        if not isinstance(answer, Principal):
            log.error(
                "the authenticator returned %s, not a Principal or None; the request is refused",
                type(answer).__name__,
            )
            raise Refusal(500, "authentication_failed", "authentication failed")
        self._throttle.passed(client)
        return answer


def _credentials(asked: AuthRequest) -> list[str]:
    """The values of `asked` that may be secrets: every header's (ket cannot tell which one
    carries an API key), each cookie's, the Authorization header's credentials (decoded, for
    Basic) and the sign-in form's token."""
    values = [*asked.headers.values(), asked.dashboard_token or ""]
    values += [
        cookie.partition("=")[2].strip() for cookie in asked.headers.get("cookie", "").split(";")
    ]
    scheme, _, credentials = asked.headers.get("authorization", "").strip().partition(" ")
    values.append(credentials.strip())
    if scheme.lower() == "basic":
        try:
            pair = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            pair = ""
        values += [pair, pair.partition(":")[2]]
    return values


def _presented(asked: AuthRequest) -> bool:
    """Whether `asked` carried credentials ket can tell: an Authorization header, or the
    dashboard's token (its sign-in form's, or its cookie's)."""
    return bool(asked.dashboard_token) or "authorization" in asked.headers


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance with an async __call__
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def _challenge(scheme: dict[str, Any]) -> dict[str, str]:
    """The WWW-Authenticate header a 401 carries, for an HTTP scheme (RFC 9110)."""
    if scheme.get("type") != "http":
        return {}
    return {"WWW-Authenticate": f'{str(scheme.get("scheme", "bearer")).title()} realm="ket"'}
