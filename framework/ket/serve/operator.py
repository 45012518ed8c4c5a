"""The operator API of `ket serve`: a tenant's queues as JSON, and their pause and resume.

    GET  /operator/queues                  jobs:read     {"queues": [...]}
    POST /operator/queues/{queue}/pause    queues:write  {"queue", "paused", "changed"}
    POST /operator/queues/{queue}/resume   queues:write

Each request is admitted by the gate as a function call is: the tenant it names (the
`X-Ket-Tenant` header or the host), the deployment's authenticator on the request's own
headers (the dashboard's session cookie is not the dashboard's to lend: it is never read here),
then the permission. Then a queue the deployment does not declare is 404 `unknown_queue` (a
resume also takes a paused queue the deployment no longer declares, so that its pause can be
lifted), and a POST must carry `Content-Type: application/json` and no input (an empty body or
`{}`), for the reason a function call must: a browser sends that type to another site only
after a CORS preflight, which this server does not answer, so no other site's page can make a
visitor's browser pause a queue with the visitor's cookies.

The operations are `ket queues`' (ket.operate), and each pause and resume is recorded in the
tenant's audit log with the principal's subject and source `api`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ket.catalog import Catalog
from ket.errors import KetError, NotMigrated, StoreError, StoreUnavailable
from ket.operate import (
    Actor,
    declared_queue,
    pause_queue,
    queue_rows,
    resumable_queue,
    resume_queue,
)
from ket.serve.body import read_input
from ket.serve.gate import Caller, Gate
from ket.serve.principal import JOBS_READ, QUEUES_WRITE
from ket.serve.refusal import Refusal, json_response
from ket.serve.stores import TenantStores
from ket.store.contract import JobStore, QueryableStore, QueueControl

PREFIX = "/operator"
SOURCE = "api"


class OperatorApi:
    """The operator API's endpoints, on the server's gate and the tenants' stores."""

    def __init__(self, catalog: Catalog, gate: Gate, stores: TenantStores) -> None:
        self._catalog = catalog
        self._gate = gate
        self._stores = stores

    def routes(self) -> list[BaseRoute]:
        """The API's routes, to mount beside the functions."""
        return [
            Route(PREFIX + "/queues", self.queues, methods=["GET"]),
            Route(PREFIX + "/queues/{queue}/pause", self.pause, methods=["POST"]),
            Route(PREFIX + "/queues/{queue}/resume", self.resume, methods=["POST"]),
        ]

    async def queues(self, request: Request) -> Response:
        """Every queue of the tenant, as `ket queues list --format json` prints them."""
        caller = await self._gate.admit(request, JOBS_READ)
        store = await self._stores.store(caller.tenant, caller.url)
        try:
            rows = await queue_rows(pausable(store), self._catalog)
        except StoreUnavailable as error:
            raise self._stores.unavailable(caller.tenant, error) from None
        except NotMigrated:
            raise not_migrated(caller.tenant) from None
        return json_response({"queues": [row.to_json() for row in rows]})

    async def pause(self, request: Request) -> Response:
        return await self._set(request, paused=True)

    async def resume(self, request: Request) -> Response:
        return await self._set(request, paused=False)

    async def _set(self, request: Request, *, paused: bool) -> Response:
        caller = await self._gate.admit(request, QUEUES_WRITE)
        store = await self._stores.store(caller.tenant, caller.url)
        try:
            queue = await checked_queue(
                store, self._catalog, request.path_params["queue"], paused=paused
            )
            await _no_input(request, self._catalog.serve.max_body_bytes)
            changed = await set_paused(store, queue, caller, source=SOURCE, paused=paused)
        except StoreUnavailable as error:
            raise self._stores.unavailable(caller.tenant, error) from None
        except NotMigrated:
            raise not_migrated(caller.tenant) from None
        return json_response({"queue": queue, "paused": paused, "changed": changed})


def not_migrated(tenant: str) -> Refusal:
    """A request that met `tenant`'s database older than this ket: 503, saying the cure (which
    is an operator's, so no Retry-After)."""
    return Refusal(
        503,
        "tenant_not_migrated",
        f"the database of tenant {tenant!r} lacks the ket tables of this version: an operator "
        "runs `ket migrate`",
    )


def pausable(store: JobStore) -> JobStore:
    """`store`, if it can list queues and pause them; Refusal (501) otherwise."""
    if not isinstance(store, QueueControl) or not isinstance(store, QueryableStore):
        raise Refusal(501, "no_queue_control", "this tenant's store cannot pause queues")
    return store


async def checked_queue(store: JobStore, catalog: Catalog, named: str, *, paused: bool) -> str:
    """The queue a request names, if it may be paused (the deployment declares it) or resumed
    (declared, or paused now); Refusal (404) naming the declared queues otherwise."""
    pausable(store)
    try:
        if paused:
            return declared_queue(catalog, named)
        return await resumable_queue(store, catalog, named)
    except StoreError:
        raise  # the database's failure, not the caller's queue
    except KetError as error:
        raise Refusal(404, "unknown_queue", error.message) from None


async def set_paused(
    store: JobStore, queue: str, caller: Caller, *, source: str, paused: bool
) -> bool:
    """Pause or resume `queue` as `caller`'s principal through `source` (audited); True when
    it changed."""
    actor = Actor(subject=caller.principal.subject, source=source)
    act = pause_queue if paused else resume_queue
    return await act(store, queue, actor, tenant=caller.tenant)


async def _no_input(request: Request, cap: int) -> None:
    """Refusal (415, 413, 400, 422) unless the body is JSON and holds no input."""
    body = await read_input(request, cap)
    if body.value:
        raise Refusal(
            422,
            "invalid_input",
            "pausing and resuming a queue take no input: send {} or an empty body",
            detail=[
                {"loc": [key], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
                for key in sorted(body.value)
            ],
        )
