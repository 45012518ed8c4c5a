"""Serving every tenant: one TenantWorker per tenant database, the list refreshed periodically.

Each tenant gets the deployment's queue concurrency (and plain-handler threads) of its own, so a
busy tenant cannot take another tenant's slots. A tenant whose database cannot be reached only
affects itself: it is logged (once a minute at most) and retried on the next refresh while the
others run. A registry that cannot be read keeps the current tenant list until it answers.
Registered tenants that cannot be served (two that resolve to one database, a name outside the
grammar) are refused, each logged once with the reason, and the others are served.

Tenants start side by side, STARTS_AT_ONCE at a time (a start opens the tenant's store and checks
its model tables: one connection and a statement or two). A refresh waits for the starts it began
for START_WAIT_SECONDS at most, then leaves the rest to finish on their own: with a thousand new
tenants it is over well within its bound, and the next refresh starts none twice.

When worker processes share the tenants (`share`, see `ket.runtime.share`), each serves only the
tenants it owns: the refresh runs as soon as the peers change, and starts the tenants this worker
gained before it stops (gracefully, all at once) the ones it gave up, so that a handover leaves a
brief overlap rather than a gap.

A burst (`drain()`, `ket worker --burst`) reads the tenants once, serves every one of them (no
share: it gives no other worker its tenants), and stops each tenant's worker once it has run
everything due (runtime/burst.py), or all of them at the stop signal, as `run()` does; a tenant
it cannot open, or whose start fails, is reported, not retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ket.catalog import Catalog
from ket.connection.url import is_postgres
from ket.runtime.contexts import Contexts, default_blobs, install_models
from ket.runtime.events import Hooks, process_hooks
from ket.runtime.flag import Flag
from ket.runtime.share import TenantShare
from ket.runtime.supervisor import Repeats, Service, Supervisor
from ket.runtime.tenancy import resolve_tenants
from ket.runtime.threads import HandlerThreads, handler_threads
from ket.runtime.worker import TenantWorker
from ket.storage import BlobStore
from ket.store.contract import JobStore
from ket.transport import Sender

log = logging.getLogger("ket.worker")

# Tenant starts under way at once: enough to keep a budget of 20 connections busy with them
# (each start waits for its connection, then a statement or two), few enough that the tenants
# already served are not queued behind a herd of starts in the budget.
STARTS_AT_ONCE = 8
# How long a refresh waits for the starts it began before it goes on (stops the tenants gone);
# the rest finish on their own. Well within the refresh's bound (REFRESH_TIMEOUT_SECONDS).
START_WAIT_SECONDS = 20.0
REFRESH_TIMEOUT_SECONDS = 60.0

OpenStore = Callable[..., Awaitable[JobStore]]  # (url, channel=...)


class Channels(Protocol):
    """The control channel of a deployment's tenants (ket.wakeup.control_channel)."""

    def for_tenant(self, tenant: str) -> object:
        """The tenant store's part in it, for `open_store(url, channel=...)`."""
        ...

    async def close(self) -> None:
        """Send what is pending and let go of the hint connections."""
        ...


ListTenants = Callable[[], Awaitable[dict[str, str | None]]]


class TenantRefresh:
    """The service that starts workers for new tenants and stops those of removed ones."""

    name = "tenant refresh"

    def __init__(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self.interval = fleet.catalog.worker.tenant_refresh_ms / 1000

    async def tick(self) -> None:
        await self._fleet.refresh()


@dataclass(frozen=True, kw_only=True)
class Drained:
    """What a burst did: the tenants it drained, those it could not (their database could not
    be opened, or failed the start: the errors are logged), and the outcomes of the jobs it
    ran, by kind (`completed`, `failed`, `discarded`, ...)."""

    tenants: tuple[str, ...]
    failed: tuple[str, ...]
    outcomes: dict[str, int]

    @property
    def discarded(self) -> int:
        """How many of the jobs it ran it discarded."""
        return self.outcomes.get("discarded", 0)


class Fleet:
    """Starts, refreshes and stops the tenant workers of one process."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        template: str,
        list_tenants: ListTenants,
        open_store: OpenStore,
        worker_id: str,
        sender: Sender,
        blobs: BlobStore | None = None,  # None: what KET_STORAGE_URL names
        hooks: Hooks | None = None,
        only: str | None = None,
        channels: Channels | None = None,
        share: TenantShare | None = None,  # None: serve every tenant, as a lone worker does
        burst: bool = False,  # its tenant workers run what is due and stop: see drain()
        threads: HandlerThreads | None = None,  # None: handler_threads(catalog) of them
    ) -> None:
        self.catalog = catalog
        self._template = template
        self._list = list_tenants
        self._open = open_store
        self._worker_id = worker_id
        self.hooks = hooks or process_hooks()
        self._only = only
        # with several tenants on PostgreSQL, their wake-ups come through the control
        # database, one LISTEN for all (ket.wakeup.control_channel)
        self._channels = channels
        self._several = False  # the registry lists tenants
        self._share = share if only is None and not burst else None
        self._burst = burst
        self._refreshing = asyncio.Lock()  # the periodic refresh and a membership change
        self._elsewhere: set[str] = set()  # registered tenants that other workers serve
        self._sender = sender
        # one backend for every tenant (an S3 client keeps its connections for all of them)
        self._blobs = blobs if blobs is not None else default_blobs()
        self._repeats = Repeats()
        self._refused: dict[str, str] = {}  # tenant -> why it is not served, as last logged
        self._servable = 0  # registered tenants that can be served, by this worker or others
        self.workers: dict[str, TenantWorker] = {}
        # starts under way, by tenant (see STARTS_AT_ONCE), and the gate they pass one by one
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._gate = asyncio.Semaphore(STARTS_AT_ONCE)
        # the plain handlers' threads, shared by the tenants (runtime/threads.py)
        self._threads = threads or HandlerThreads(handler_threads(catalog))

    async def run(self, stop: asyncio.Event, services: Sequence[Service] = ()) -> None:
        """Serve until `stop` is set, then stop every tenant gracefully (concurrently).
        `services` run beside the tenant refresh, under the process's supervisor (the job
        stats that feed metrics, say)."""
        supervisor = Supervisor(tenant=None, stopping=Flag(), repeats=self._repeats)
        supervisor.every(TenantRefresh(self), at_once=True, timeout=REFRESH_TIMEOUT_SECONDS)
        share = self._share
        if share is not None:
            supervisor.keep("tenant ownership", lambda: self._follow(share))
        for service in services:
            supervisor.every(service, timeout=max(60.0, service.interval))
        try:
            await stop.wait()
        finally:
            await supervisor.stop()
            await self._abandon_starts(list(self._starting))
            await asyncio.gather(*[self._stop(name) for name in list(self.workers)])
            self._threads.shutdown(wait=False, cancel_futures=True)
            if self._channels is not None:
                await self._channels.close()

    async def drain(self, stop: asyncio.Event, services: Sequence[Service] = ()) -> Drained:
        """A burst: serve each tenant until it has run everything due or `stop` is set, then
        stop its worker gracefully; `services` run meanwhile, as in `run()`. Raises when the
        registry cannot be read."""
        supervisor = Supervisor(tenant=None, stopping=Flag(), repeats=self._repeats)
        for service in services:
            supervisor.every(service, timeout=max(60.0, service.interval))
        try:
            wanted = await self._wanted()
            await asyncio.gather(*[self._begin(n, wanted[n], len(wanted)) for n in sorted(wanted)])
            bursts = {name: worker.burst for name, worker in self.workers.items()}
            await asyncio.gather(*[self._drain(name, stop) for name in bursts])
        finally:
            await supervisor.stop()
            await self._abandon_starts(list(self._starting))
            await asyncio.gather(*[self._stop(name) for name in list(self.workers)])
            self._threads.shutdown(wait=False, cancel_futures=True)
            if self._channels is not None:
                await self._channels.close()
        outcomes: Counter[str] = Counter()
        drained = set()
        for name, burst in bursts.items():
            assert burst is not None
            outcomes.update(burst.outcomes)
            if burst.failure is None:
                drained.add(name)
        failed = tuple(sorted(set(wanted) - drained))
        return Drained(tenants=tuple(sorted(drained)), failed=failed, outcomes=dict(outcomes))

    async def _drain(self, name: str, stop: asyncio.Event) -> None:
        """Stop the worker of tenant `name` once it is done, or at `stop`."""
        burst = self.workers[name].burst
        assert burst is not None
        waits = [asyncio.ensure_future(burst.done.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        await self._stop(name)

    async def refresh(self) -> None:
        """Start workers for new (or newly owned) tenants and stop those of removed (or given
        up) ones; raises, keeping the current tenants, when the registry or the worker roster
        cannot be read."""
        async with self._refreshing:
            wanted = await self._wanted()
            new = [n for n in sorted(wanted) if n not in self.workers and n not in self._starting]
            # how many tenants the fleet starts with these, as this process can tell: its own
            # new ones, scaled by its share (`wanted`) of the servable tenants (all of them when
            # a fleet starts; a dead worker's part when its tenants are taken over; one when a
            # tenant is added)
            together = len(new) * self._servable / max(len(wanted), 1)
            begun = [self._begin(name, wanted[name], together) for name in new]
            if begun:  # the rest go on starting after the refresh (see START_WAIT_SECONDS)
                await asyncio.wait(begun, timeout=START_WAIT_SECONDS)
            await self._abandon_starts(sorted(set(self._starting) - set(wanted)))
            gone = sorted(set(self.workers) - set(wanted))
            for name in gone:
                if name in self._refused:
                    log.info("stopping the worker of tenant %s, which is no longer served", name)
                elif name in self._elsewhere:
                    log.info("tenant %s is now served by other workers; stopping its worker", name)
                else:
                    log.info("tenant %s was removed; stopping its worker", name)
            await asyncio.gather(*[self._stop(name) for name in gone])

    def stores(self) -> dict[str, JobStore]:
        """The store of every tenant served now, by tenant."""
        return {name: worker.store for name, worker in self.workers.items()}

    def slots(self) -> dict[tuple[str, str], tuple[int, int]]:
        """By (tenant, queue): the attempts running now, and the slots there are."""
        return {
            (tenant, queue): counts
            for tenant, worker in self.workers.items()
            for queue, counts in worker.slots().items()
        }

    async def hand_back_now(self, timeout: float) -> None:
        """The second signal: every tenant hands back its running jobs within `timeout`."""
        await asyncio.gather(*[w.hand_back_now(timeout) for w in self.workers.values()])

    async def _wanted(self) -> dict[str, str]:
        tenancy = resolve_tenants(await self._list(), self._template, only=self._only)
        for name, reason in sorted(tenancy.refused.items()):
            if self._refused.get(name) != reason:  # said once, until the reason changes
                log.error("not serving tenant %r: %s", name, reason)
        self._refused = tenancy.refused
        self._servable = len(tenancy.urls)
        self._several = bool(tenancy.registered)
        if self._share is None:
            return tenancy.urls
        mine = await self._share.mine(tenancy.urls)
        self._elsewhere = set(tenancy.urls) - mine
        return {name: url for name, url in tenancy.urls.items() if name in mine}

    async def _follow(self, share: TenantShare) -> None:
        """Refresh as soon as the peers change (a worker started, stopped or went stale)."""
        while True:
            await share.changed()
            await self.refresh()

    def _begin(self, name: str, url: str, together: float) -> asyncio.Task[None]:
        """Start tenant `name` in a task of its own, once a start may begin (STARTS_AT_ONCE)."""

        async def start() -> None:
            try:
                async with self._gate:
                    await self._start(name, url, together)
            finally:
                del self._starting[name]

        task = self._starting[name] = asyncio.ensure_future(start())
        return task

    async def _abandon_starts(self, names: Sequence[str]) -> None:
        """Cancel the starts under way of these tenants (removed, or the fleet stops)."""
        tasks = [self._starting[name] for name in names if name in self._starting]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _start(self, name: str, url: str, together: float) -> None:
        where = f"opening the database of tenant {name}"
        try:
            if self._several and self._channels is not None and is_postgres(url):
                store = await self._open(url, channel=self._channels.for_tenant(name))
            else:
                store = await self._open(url)
        except Exception as error:
            self._repeats.failure(where, error)
            return
        try:
            await install_models(store, self.catalog)
            contexts = Contexts(
                store=store,
                catalog=self.catalog,
                tenant=name,
                sender=self._sender,
                blobs=self._blobs,
                hooks=self.hooks,
            )
        except BaseException as error:  # a start abandoned (cancelled) closes its store too
            await store.close()
            if not isinstance(error, Exception):
                raise
            self._repeats.failure(where, error)
            return
        self._repeats.recovered(where)
        worker = TenantWorker(
            store=store,
            catalog=self.catalog,
            tenant=name,
            worker_id=self._worker_id,
            hooks=self.hooks,
            contexts=contexts,
            repeats=self._repeats,
            served=self._served,
            fleet=self._fleet_size,
            together=together,
            burst=self._burst,
            executor=self._threads.for_tenant(name),
        )
        worker.start()
        self.workers[name] = worker
        log.info("serving tenant %s", name)

    def _served(self) -> int:
        """How many tenants this process serves now."""
        return len(self.workers)

    def _fleet_size(self) -> int:
        """How many tenants the worker processes sharing them serve together."""
        return max(self._servable, len(self.workers))

    async def _stop(self, name: str) -> None:
        worker = self.workers[name]  # listed until stopped: a second signal hands its jobs back
        try:
            await worker.stop()
        finally:
            del self.workers[name]
            await worker.store.close()
