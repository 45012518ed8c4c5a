"""The ASGI app of `ket serve`: Starlette, the functions under /functions/, /openapi.json, the
operator API under /operator/ (serve/operator.py).

`create_app` builds it from a catalog and where the tenants are; the parts every route needs
(the gate, the tenants' stores) are on `app.state.ket`, so routes mounted later (the dashboard,
/metrics) admit their requests the same way::

    app = create_app(catalog, list_tenants=..., template=..., open_store=...)
    uvicorn.run(app)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from ket.catalog import Catalog
from ket.runtime.contexts import default_sender
from ket.runtime.events import process_hooks
from ket.runtime.flag import Flag
from ket.runtime.supervisor import Repeats, Service, Supervisor
from ket.serve.function import PREFIX, FunctionEndpoint
from ket.serve.gate import Gate
from ket.serve.openapi import openapi_document
from ket.serve.operator import OperatorApi
from ket.serve.refusal import Refusal, json_response, on_http_exception, on_refusal
from ket.serve.stores import OpenStore, TenantStores
from ket.serve.tenant import ListTenants, TenantLookup
from ket.storage import BlobStore
from ket.transport import Sender

if TYPE_CHECKING:
    from ket.runtime.fleet import Channels
    from ket.serve.dashboard.view import ListWorkers

log = logging.getLogger("ket.serve")


@dataclass(frozen=True, kw_only=True)
class Parts:
    """What the routes share: the catalog, the gate, the tenants and their stores."""

    catalog: Catalog
    gate: Gate
    tenants: TenantLookup
    stores: TenantStores


class TenantRefresh:
    """The service that reads the registry again and closes the stores of tenants no longer
    served."""

    name = "tenant refresh"

    def __init__(self, parts: Parts) -> None:
        self._parts = parts
        self.interval = parts.tenants.interval

    async def tick(self) -> None:
        await self._parts.tenants.refresh()
        served = self._parts.tenants.tenancy.urls
        for tenant in self._parts.stores.tenants():
            if tenant not in served:
                log.info("tenant %s is no longer served; closing its database", tenant)
                await self._parts.stores.close_tenant(tenant)


def create_app(
    catalog: Catalog,
    *,
    list_tenants: ListTenants,
    template: str,
    open_store: OpenStore,
    only: str | None = None,
    sender: Sender | None = None,
    blobs: BlobStore | None = None,
    routes: Sequence[BaseRoute] = (),
    list_workers: ListWorkers | None = None,
    services: Callable[[Parts], Sequence[Service]] = lambda parts: (),
    channels: Channels | None = None,
) -> Starlette:
    """The server's ASGI app. `list_tenants` reads the registry, `template` is the database URL
    template, `open_store` opens a tenant's store, `only` serves one tenant; `sender` and `blobs`
    are ctx.transport's and ctx.storage's (None: what the environment names); `routes` are
    mounted beside the functions (they find the Parts on `request.app.state.ket`); the
    dashboard, unless the deployment turns it off, at its path, showing the workers
    `list_workers` reads from the control database; `services(parts)` run beside the tenant
    refresh while the app runs (the job stats behind metrics); `channels`, the control channel
    of a PostgreSQL registry, through which the tenants' stores wake the workers."""
    repeats = Repeats(log)
    tenants = TenantLookup(
        list_tenants=list_tenants,
        template=template,
        refresh_seconds=catalog.worker.tenant_refresh_ms / 1000,
        only=only,
        host_pattern=catalog.serve.host_pattern(),
    )
    stores = TenantStores(
        catalog=catalog,
        open_store=open_store,
        sender=sender or default_sender(),
        blobs=blobs,
        hooks=process_hooks(),
        repeats=repeats,
        channels=channels,
        several=lambda: bool(tenants.tenancy.registered),
    )
    parts = Parts(
        catalog=catalog,
        gate=Gate(catalog.serve, tenants, catalog.redact),
        tenants=tenants,
        stores=stores,
    )
    document = openapi_document(catalog)

    async def openapi(request: Request) -> Response:
        await parts.gate.admit(request)
        return json_response(document)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await tenants.refresh()  # a registry that cannot be read stops the start
        supervisor = Supervisor(tenant=None, stopping=Flag(), repeats=repeats)
        supervisor.every(TenantRefresh(parts), timeout=60.0)
        for service in services(parts):
            supervisor.every(service, timeout=max(60.0, service.interval))
        try:
            yield
        finally:
            await supervisor.stop()
            await stores.close()

    app = Starlette(
        routes=[
            Route(
                PREFIX + "{name}",
                FunctionEndpoint(catalog, parts.gate, stores).handle,
                methods=["POST"],
            ),
            Route("/openapi.json", openapi, methods=["GET"]),
            *OperatorApi(catalog, parts.gate, stores).routes(),
            *_dashboard(parts, list_workers),
            *routes,
        ],
        exception_handlers={
            Refusal: on_refusal,
            HTTPException: on_http_exception,
            Exception: _on_unexpected,
        },
        lifespan=lifespan,
    )
    app.state.ket = parts
    return app


def _dashboard(parts: Parts, list_workers: ListWorkers | None) -> list[BaseRoute]:
    """The dashboard's mount, unless the deployment declares `dashboard: None`."""
    path = parts.catalog.serve.dashboard
    if path is None:
        return []
    from ket.serve.dashboard import Dashboard, dashboard_app  # Jinja: only when it is served

    dashboard = Dashboard(
        path=path,
        catalog=parts.catalog,
        gate=parts.gate,
        tenants=parts.tenants,
        stores=parts.stores,
        list_workers=list_workers,
    )
    return [Mount(path, app=dashboard_app(dashboard))]


async def _on_unexpected(request: Request, error: Exception) -> Response:
    """A bug of ket's: the generic answer (Starlette then logs the exception)."""
    return Refusal(500, "internal", "the server failed; see its log").response()
