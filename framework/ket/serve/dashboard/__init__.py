"""The dashboard `ket serve` mounts (at `serve={"dashboard": "/dashboard"}`, the default):
jobs, queues, schedules, workers and the audit log of one tenant; retry and cancel, the pause
and resume of a queue, and the pause, resume and run now of a schedule.

Server-rendered HTML (Jinja, autoescaped) with one stylesheet and one small script from the
package, under a Content-Security-Policy that allows nothing inline. It fails closed: every
path under the mount, the static files included, is admitted by the server's gate first, so
without an authenticator, or without credentials it accepts, every answer is 401 (a sign-in
form) or 403. Reading takes the `jobs:read` permission, retrying and cancelling `jobs:write`,
pausing and resuming a queue `queues:write`, acting on a schedule `schedules:write`.

    app.mount("/dashboard", dashboard_app(dashboard))
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ket.errors import StoreUnavailable
from ket.serve.dashboard.actions import Actions
from ket.serve.dashboard.guard import SecurityHeaders, headers_of
from ket.serve.dashboard.pages import Pages
from ket.serve.dashboard.view import COOKIE, Dashboard, ListWorkers
from ket.serve.refusal import Refusal

__all__ = ["Dashboard", "ListWorkers", "dashboard_app"]


def dashboard_app(dashboard: Dashboard) -> Starlette:
    """The dashboard as an ASGI app, to mount at `dashboard.path`."""
    pages = Pages(dashboard)
    actions = Actions(dashboard, pages)
    tenant = "/t/{tenant}"
    routes = [
        Route("/", pages.root, methods=["GET"]),
        Route("/signin", actions.sign_in, methods=["POST"]),
        Route(tenant, pages.tenant_home, methods=["GET"]),
        Route(tenant + "/", pages.tenant_home, methods=["GET"]),
        Route(tenant + "/jobs", pages.jobs, methods=["GET"]),
        Route(tenant + "/jobs/{id}", pages.job, methods=["GET"]),
        Route(tenant + "/jobs/{id}/retry", actions.retry, methods=["POST"]),
        Route(tenant + "/jobs/{id}/cancel", actions.confirm_cancel, methods=["GET"]),
        Route(tenant + "/jobs/{id}/cancel", actions.cancel, methods=["POST"]),
        Route(tenant + "/bulk/{action}", actions.confirm, methods=["GET"]),
        Route(tenant + "/bulk/{action}", actions.apply, methods=["POST"]),
        Route(tenant + "/queues", pages.queues, methods=["GET"]),
        Route(tenant + "/queues/{queue}/pause", actions.pause, methods=["POST"]),
        Route(tenant + "/queues/{queue}/resume", actions.resume, methods=["POST"]),
        Route(tenant + "/charts", pages.charts, methods=["GET"]),
        Route(tenant + "/schedules", pages.schedules, methods=["GET"]),
        Route(tenant + "/schedules/{job}/pause", actions.pause_schedule, methods=["POST"]),
        Route(tenant + "/schedules/{job}/resume", actions.resume_schedule, methods=["POST"]),
        Route(tenant + "/schedules/{job}/run", actions.run_schedule, methods=["POST"]),
        Route(tenant + "/workers", pages.workers, methods=["GET"]),
        Route(tenant + "/fleet", pages.fleet, methods=["GET"]),
        Route(tenant + "/audit", pages.audit, methods=["GET"]),
        Route(tenant + "/signout", actions.sign_out, methods=["POST"]),
        Route(tenant + "/static/{name}", pages.static, methods=["GET"]),
        # anything else: refused as a page is (401, 403), then 404
        Route(tenant + "/{rest:path}", pages.unknown, methods=["GET", "POST"]),
        Route("/{rest:path}", pages.unknown, methods=["GET", "POST"]),
    ]
    refused = Refused(dashboard)
    return Starlette(
        routes=routes,
        middleware=[Middleware(SecurityHeaders)],
        exception_handlers={
            Refusal: refused.refusal,
            HTTPException: refused.http,
            StoreUnavailable: refused.unavailable,
            Exception: refused.crash,
        },
    )


class Refused:
    """Refusals as pages: 401 is the sign-in form, anything else says what was wrong."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard

    async def refusal(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, Refusal)
        if error.status == 401:
            return self._sign_in(request, error)
        return self._page(request, error.status, error.code, error.message, error.headers)

    async def http(self, request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code, "refused")
        return self._page(request, error.status_code, code, error.detail, error.headers or {})

    async def unavailable(self, request: Request, error: Exception) -> Response:
        """The tenant's database is away: 503 with Retry-After, logged once a minute."""
        assert isinstance(error, StoreUnavailable)
        tenant = request.path_params.get("tenant", "")
        refusal = self.d.stores.unavailable(tenant if _plain(tenant) else "?", error)
        return self._page(request, refusal.status, refusal.code, refusal.message, refusal.headers)

    async def crash(self, request: Request, error: Exception) -> Response:
        # outside the middleware (Starlette answers crashes last): the headers by hand
        response = HTMLResponse(
            "<!doctype html><title>500</title><p>The server failed; see its log.", 500
        )
        headers_of(response.headers)
        return response

    def _sign_in(self, request: Request, error: Refusal) -> Response:
        tenant = request.path_params.get("tenant")
        served = self.d.tenants.tenancy.urls
        named = tenant or request.headers.get("x-ket-tenant")
        offered = named is None and len(served) > 1 and self.d.catalog.serve.tenant_host is None
        had_token = COOKIE in request.cookies or request.method == "POST"
        path = request.url.path
        back = path + (f"?{request.url.query}" if request.url.query else "")
        context = {
            "css": None,
            "problem": "That token was not accepted." if had_token else "",
            "ask_tenant": offered,
            "tenant_named": named if named and _plain(named) else "",
            "next": back if request.method == "GET" and path.startswith(self.d.path) else "",
        }
        return self.d.render(request, "signin.html", context, status=401, headers=error.headers)

    def _page(
        self, request: Request, status: int, code: str, message: str, headers: Mapping[str, str]
    ) -> Response:
        tenant = request.path_params.get("tenant")
        back = (
            self.d.tenant_path(tenant, "/jobs") if tenant and _plain(tenant) else self.d.path + "/"
        )
        context = {"css": None, "status": status, "code": code, "message": message, "back": back}
        return self.d.render(request, "refusal.html", context, status=status, headers=headers)


def _plain(name: str) -> bool:
    """A tenant name safe to put back in a link (the grammar's characters only)."""
    return name.isascii() and all(c.isalnum() or c in "_-" for c in name) and len(name) <= 63
