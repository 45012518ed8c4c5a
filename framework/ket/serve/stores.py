"""Each tenant's store and contexts, opened on the tenant's first request and kept open.

A function runs against the store of its request's tenant through the same `Contexts` the
worker and `ket call` use. Stores are opened lazily (a server in front of a thousand tenants
holds connections only for the tenants it is asked about), one at a time per tenant, and closed
when the tenant stops being served or the server stops. A request that meets a tenant's
database away (it cannot be opened, or a statement finds it gone) is answered 503 with
`Retry-After`, and logged once a minute at most with a count, never with a traceback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ket.catalog import Catalog
from ket.connection.url import is_postgres
from ket.errors import StoreUnavailable
from ket.runtime.contexts import Contexts, default_blobs, install_models
from ket.runtime.events import Hooks
from ket.runtime.supervisor import Repeats
from ket.serve.refusal import Refusal
from ket.storage import BlobStore
from ket.store.contract import JobStore
from ket.transport import Sender

if TYPE_CHECKING:
    from ket.runtime.fleet import Channels

log = logging.getLogger("ket.serve")

# what a 503 tells the client: try again in this many seconds (a restart takes a few)
RETRY_LATER = {"Retry-After": "5"}

OpenStore = Callable[..., Awaitable[JobStore]]  # (url, channel=...)


class TenantStores:
    """The open stores of the tenants this server has served, by tenant."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        open_store: OpenStore,
        sender: Sender,
        blobs: BlobStore | None = None,  # None: what KET_STORAGE_URL names
        hooks: Hooks | None = None,
        repeats: Repeats | None = None,
        channels: Channels | None = None,
        several: Callable[[], bool] = lambda: False,
    ) -> None:
        """`channels`: the deployment's control channel (PostgreSQL registry), given to the
        store of each tenant on PostgreSQL while `several()` (the registry lists tenants):
        what a function enqueues, and what the dashboard retries, then wakes the workers
        that listen there (SqlStore._available) rather than waiting for their safety visit."""
        self._catalog = catalog
        self._open = open_store
        self._channels = channels
        self._several = several
        self._sender = sender
        # one backend for every tenant, as the worker has
        self._blobs = blobs if blobs is not None else default_blobs()
        self._hooks = hooks
        self._repeats = repeats or Repeats(log)
        self._open_ones: dict[str, tuple[str, JobStore, Contexts]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def contexts(self, tenant: str, url: str) -> Contexts:
        """The contexts of `tenant`, whose database is `url`; Refusal (503) when it cannot be
        opened, which is logged (once a minute at most)."""
        found = self._open_ones.get(tenant)
        if found is not None and found[0] == url:
            return found[2]
        lock = self._locks.setdefault(tenant, asyncio.Lock())
        async with lock:
            found = self._open_ones.get(tenant)
            if found is not None and found[0] == url:
                return found[2]
            if found is not None:  # the registry moved the tenant to another database
                await self.close_tenant(tenant)
            contexts = await self._start(tenant, url)
        return contexts

    async def _start(self, tenant: str, url: str) -> Contexts:
        where = f"opening the database of tenant {tenant}"
        try:
            if self._channels is not None and self._several() and is_postgres(url):
                store = await self._open(url, channel=self._channels.for_tenant(tenant))
            else:
                store = await self._open(url)
        except Exception as error:
            self._repeats.failure(where, error)
            raise Refusal(
                503,
                "tenant_unavailable",
                f"tenant {tenant!r} cannot be served now",
                headers=RETRY_LATER,
            ) from None
        try:
            await install_models(store, self._catalog)
            contexts = Contexts(
                store=store,
                catalog=self._catalog,
                tenant=tenant,
                sender=self._sender,
                blobs=self._blobs,
                hooks=self._hooks,
            )
        except Exception as error:
            await store.close()
            self._repeats.failure(where, error)
            raise Refusal(
                503, "tenant_unavailable", f"tenant {tenant!r} cannot be served now"
            ) from None
        self._repeats.recovered(where)
        self._open_ones[tenant] = (url, store, contexts)
        return contexts

    def unavailable(self, tenant: str, error: StoreUnavailable) -> Refusal:
        """A request that met `tenant`'s database away: 503 with Retry-After, the failure
        logged once a minute at most (with the count of those not logged), no traceback."""
        self._repeats.failure(f"the database of tenant {tenant}", error, level=logging.WARNING)
        return Refusal(
            503,
            "database_unavailable",
            f"the database of tenant {tenant!r} cannot be reached now; try again shortly",
            headers=RETRY_LATER,
        )

    async def store(self, tenant: str, url: str) -> JobStore:
        """The store of `tenant`, whose database is `url` (opened as `contexts` opens it)."""
        await self.contexts(tenant, url)
        return self._open_ones[tenant][1]

    def tenants(self) -> list[str]:
        """The tenants whose stores are open."""
        return sorted(self._open_ones)

    def open_stores(self) -> dict[str, JobStore]:
        """The open stores, by tenant (what the job-stats gauges read)."""
        return {tenant: found[1] for tenant, found in self._open_ones.items()}

    async def close_tenant(self, tenant: str) -> None:
        """Close the store of `tenant`, if open."""
        found = self._open_ones.pop(tenant, None)
        if found is not None:
            await found[1].close()

    async def close(self) -> None:
        """Close every open store."""
        for tenant in list(self._open_ones):
            await self.close_tenant(tenant)
        if self._channels is not None:
            await self._channels.close()
