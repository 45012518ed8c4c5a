"""What keeps the dashboard's pages and actions to the operator who asked for them.

- Headers on every answer: a Content-Security-Policy that allows scripts, styles and requests
  from the dashboard's own origin only (no inline script, no `unsafe-inline`, no framing; the
  one inline style is the dashboard's own stylesheet, allowed by its digest), and no caching of
  job data.
- A CSRF token in every form that changes something: an HMAC of the tenant, the principal's
  subject, the sign-in session it was issued in (dashboard/session.py; none for a principal
  the authenticator admits from the request's own headers) and the time it was issued, under
  the dashboard's key (`KET_DASHBOARD_KEY`, which replicas behind one load balancer share;
  else a random key per process). A token is good for 12 hours at most, for that subject in
  that tenant and that session only: once the session is signed out, its tokens are of no use.
- A POST whose `Origin` or `Sec-Fetch-Site` says it comes from another site is refused before
  its token is even read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from importlib import resources

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ket.serve.refusal import Refusal

# The stylesheet, inline in the pages shown before a sign-in (the sign-in form, a refusal): the
# static files are behind the gate like every other path, so those pages cannot link to it. The
# CSP allows that one text by its digest, and no other inline style.
PAGE_CSS = resources.files("ket.serve.dashboard").joinpath("static", "dashboard.css").read_text()
_PAGE_CSS_DIGEST = base64.b64encode(hashlib.sha256(PAGE_CSS.encode()).digest()).decode()
CSP = (
    f"default-src 'none'; script-src 'self'; style-src 'self' 'sha256-{_PAGE_CSS_DIGEST}'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}
KEY_VARIABLE = "KET_DASHBOARD_KEY"
TOKEN_SECONDS = 12 * 3_600


class SecurityHeaders:
    """ASGI middleware: the headers above on every answer of the dashboard; `no-store` unless
    the answer says how it may be cached (the fingerprinted static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = [(k.lower(), v) for k, v in message.get("headers", [])]
                names = {k for k, _ in given}
                extra = [(k.encode(), v.encode()) for k, v in HEADERS.items()]
                if b"cache-control" not in names:
                    extra.append((b"cache-control", b"no-store"))
                message["headers"] = [*given, *extra]
            await send(message)

        await self.app(scope, receive, with_headers)


def dashboard_key() -> bytes:
    """The key of the dashboard's MACs (CSRF tokens, session cookies): from KET_DASHBOARD_KEY,
    else a random one for this process."""
    given = os.environ.get(KEY_VARIABLE, "")
    return hashlib.sha256(given.encode()).digest() if given else secrets.token_bytes(32)


class Csrf:
    """Issues and checks the dashboard's CSRF tokens (see the module's docstring)."""

    def __init__(self, key: bytes | None = None) -> None:
        self._key = dashboard_key() if key is None else key

    def issue(
        self, tenant: str, subject: str, session: str = "", *, now: float | None = None
    ) -> str:
        """A token for `subject` acting in `tenant`, within `session` (its key; "" for none)."""
        issued = str(int(time.time() if now is None else now))
        return f"{issued}.{self._mac(tenant, subject, session, issued)}"

    def check(
        self,
        token: str,
        tenant: str,
        subject: str,
        session: str = "",
        *,
        now: float | None = None,
    ) -> None:
        """Refusal (403) unless `token` was issued here, lately, for `subject` in `tenant`
        within `session`."""
        issued, _, mac = token.partition(".")
        current = time.time() if now is None else now
        fresh = issued.isdigit() and -60 <= current - int(issued) <= TOKEN_SECONDS
        good = self._mac(tenant, subject, session, issued)
        if not (fresh and hmac.compare_digest(mac, good)):
            raise Refusal(
                403,
                "csrf_refused",
                "the form's security token is missing, expired or not this page's: reload "
                "the page and try again",
            )

    def _mac(self, tenant: str, subject: str, session: str, issued: str) -> str:
        text = f"ket-dashboard-csrf\0{tenant}\0{subject}\0{session}\0{issued}".encode()
        return hmac.new(self._key, text, hashlib.sha256).hexdigest()


def same_site(request: Request) -> None:
    """Refusal (403) for a POST that says it comes from another site."""
    fetched = request.headers.get("sec-fetch-site")
    if fetched is not None and fetched not in ("same-origin", "none"):
        raise Refusal(403, "cross_site", "the dashboard takes no form posted from another site")
    origin = request.headers.get("origin")
    if origin is not None and origin != _own_origin(request):
        raise Refusal(403, "cross_site", "the dashboard takes no form posted from another site")


def _own_origin(request: Request) -> str:
    scheme = forwarded_scheme(request)
    return f"{scheme}://{request.headers.get('host', '')}"


def forwarded_scheme(request: Request) -> str:
    """`https` when the request came over TLS, to this server or to a proxy in front of it
    that says so (`X-Forwarded-Proto`); else the request's own scheme."""
    proto = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return proto if proto in ("http", "https") else request.url.scheme


def headers_of(mapping: MutableHeaders) -> None:
    """Add the security headers to a response's headers (for answers the middleware does not
    see: a crash's)."""
    for name, value in HEADERS.items():
        mapping[name] = value
    mapping["cache-control"] = "no-store"
