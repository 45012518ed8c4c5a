"""Serving every tenant: one TenantWorker per tenant database, the list refreshed periodically.

Each tenant gets the deployment's queue concurrency of its own, so a busy tenant cannot take
another tenant's slots. A tenant whose database cannot be reached only affects itself: its
worker logs, backs off and retries while the others run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor

from ket.catalog import Catalog
from ket.errors import KetError
from ket.runtime.contexts import Contexts, install_models
from ket.runtime.events import Hooks
from ket.runtime.events import hooks as default_hooks
from ket.runtime.tenancy import DEFAULT_TENANT, tenant_database
from ket.runtime.worker import TenantWorker
from ket.store.contract import JobStore
from ket.transport import Sender

log = logging.getLogger("ket.worker")

OpenStore = Callable[[str], Awaitable[JobStore]]
ListTenants = Callable[[], Awaitable[dict[str, str | None]]]


class Supervisor:
    """Starts, refreshes and stops the tenant workers of one process."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        template: str,
        list_tenants: ListTenants,
        open_store: OpenStore,
        worker_id: str,
        executor: Executor,
        sender: Sender,
        hooks: Hooks | None = None,
        only: str | None = None,
    ) -> None:
        self.catalog = catalog
        self._template = template
        self._list = list_tenants
        self._open = open_store
        self._worker_id = worker_id
        self._executor = executor
        self.hooks = hooks or default_hooks
        self._only = only
        self._sender = sender
        self.workers: dict[str, TenantWorker] = {}

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set, then stop every tenant gracefully (concurrently)."""
        refresh = self.catalog.worker.tenant_refresh_ms / 1000
        while not stop.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), refresh)
        await asyncio.gather(*[self._stop(name) for name in list(self.workers)])

    async def refresh(self) -> None:
        """Start workers for new tenants and stop those of removed ones."""
        try:
            wanted = await self._wanted()
        except KetError as error:
            log.error("could not read the tenant list: %s; keeping the current one", error)
            return
        for name in sorted(set(self.workers) - set(wanted)):
            log.info("tenant %s was removed; stopping its worker", name)
            await self._stop(name)
        for name, url in sorted(wanted.items()):
            if name not in self.workers:
                await self._start(name, url)

    async def _wanted(self) -> dict[str, str]:
        registered = await self._list()
        if self._only is not None:
            if registered and self._only not in registered:
                raise KetError(f"tenant {self._only!r} is not registered")
            registered = {self._only: registered.get(self._only)}
        if not registered:
            registered = {DEFAULT_TENANT: None}
        count = len(registered)
        return {
            name: url or tenant_database(self._template, name, tenants=count)
            for name, url in registered.items()
        }

    async def _start(self, name: str, url: str) -> None:
        try:
            store = await self._open(url)
            await install_models(store, self.catalog)
            contexts = Contexts(
                store=store,
                catalog=self.catalog,
                tenant=name,
                sender=self._sender,
                hooks=self.hooks,
            )
        except KetError as error:
            log.error("tenant %s: cannot open its database: %s; retrying later", name, error)
            return
        worker = TenantWorker(
            store=store,
            catalog=self.catalog,
            tenant=name,
            worker_id=self._worker_id,
            executor=self._executor,
            hooks=self.hooks,
            contexts=contexts,
        )
        worker.start()
        self.workers[name] = worker
        log.info("serving tenant %s", name)

    async def _stop(self, name: str) -> None:
        worker = self.workers.pop(name)
        await worker.stop()
        await worker.store.close()
