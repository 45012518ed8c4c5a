"""The worker for one tenant database: claim -> execute -> settle, plus the background services.

Each queue has its own loop that claims as many jobs as it has free slots, runs each as a task,
and waits for a wake-up (or its adaptive poll interval) when the queue runs dry. Outcomes go to a
settler that writes them in batches. Heartbeats, rescue, pruning and schedule sweeps run beside
them. `stop()` stops claiming, lets running work finish within the grace period, then aborts it
(reason `shutdown`) and hands unfinished jobs back at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field

from ket.catalog import Catalog, JobSpec
from ket.context import AbortSignal
from ket.errors import KetError
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks, Kind
from ket.runtime.execute import Result, run_attempt
from ket.runtime.sweep import sweep
from ket.store.contract import JobStore, PushStore
from ket.store.types import (
    ClaimedJob,
    ErrorInfo,
    Heartbeat,
    JobClaim,
    JobId,
    Lease,
    Prune,
    Settle,
)

log = logging.getLogger("ket.worker")

PRUNE_EVERY_SECONDS = 300.0
RETENTION_SECONDS = 7 * 86_400.0
SETTLE_BATCH = 500
_REPORTED: dict[str, Kind] = {
    "completed": "completed",
    "failed": "failed",
    "discarded": "discarded",
    "cancelled": "cancelled",
    "handed_back": "failed",
    "lease_lost": "failed",
}


@dataclass(eq=False)
class _Running:
    job: ClaimedJob
    signal: AbortSignal
    task: asyncio.Task[None] | None = None


@dataclass(eq=False)
class _Queue:
    name: str
    slots: int
    busy: int = 0
    freed: asyncio.Event = field(default_factory=asyncio.Event)


class TenantWorker:
    """Runs one tenant's jobs from one store until stopped."""

    def __init__(
        self,
        *,
        store: JobStore,
        catalog: Catalog,
        tenant: str,
        worker_id: str,
        executor: Executor,
        hooks: Hooks | None = None,
        contexts: Contexts,
        retention_seconds: float = RETENTION_SECONDS,
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.tenant = tenant
        self.worker_id = worker_id
        self.hooks = hooks or Hooks()
        self._executor = executor
        self._config = catalog.worker
        self._retention = retention_seconds
        self._contexts = contexts
        # runtime_checkable isinstance is slow: decide once, not on every idle wait
        self._push: PushStore | None = store if isinstance(store, PushStore) else None
        self._running: dict[JobId, _Running] = {}
        self._outcomes: asyncio.Queue[Settle | None] = asyncio.Queue()
        self._queues = {q: _Queue(q, n) for q, n in self._config.queues.items()}
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._settler: asyncio.Task[None] | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the queue loops and the background services on the running loop."""
        loops: list[Awaitable[None]] = [self._serve(q) for q in self._queues.values()]
        seconds = self._config.lease_ms / 1000
        self._settler = asyncio.ensure_future(self._settle_loop())
        loops += [
            self._every(seconds / 3, self._heartbeat),
            self._every(seconds, self._rescue),
            self._every(self._config.schedule_sweep_ms / 1000, self._sweep, at_once=True),
            self._every(PRUNE_EVERY_SECONDS, self._prune),
        ]
        self._tasks = [asyncio.ensure_future(coroutine) for coroutine in loops]

    async def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; wait for running work up to the grace, then abort and hand it back."""
        grace = self._config.shutdown_grace_ms / 1000 if grace_seconds is None else grace_seconds
        self._stopping.set()
        for queue in self._queues.values():
            queue.freed.set()
        running = [r.task for r in self._running.values() if r.task is not None]
        if running:
            await asyncio.wait(running, timeout=grace)
        for entry in list(self._running.values()):
            entry.signal.abort("shutdown")
        running = [r.task for r in self._running.values() if r.task is not None]
        if running:
            await asyncio.wait(running)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._settler is not None:  # write every outcome before returning
            self._outcomes.put_nowait(None)
            await self._settler

    @property
    def running(self) -> int:
        """How many jobs are executing in this worker now."""
        return len(self._running)

    # -- claiming ---------------------------------------------------------------------------

    async def _serve(self, queue: _Queue) -> None:
        poll_min = self._config.poll_min_ms / 1000
        poll_max = self._config.poll_max_ms / 1000
        idle = poll_min
        failures = 0
        busy = False  # the last claim filled every free slot: work is flowing
        while not self._stopping.is_set():
            free = queue.slots - queue.busy
            if free <= 0:
                queue.freed.clear()
                await queue.freed.wait()
                continue
            # When idle, listen before claiming: a job committed while the claim is in flight
            # must wake the wait that follows, not slip between the claim and the wait. While
            # work flows the claim is almost never short, so skip the extra tasks on that path.
            watch = None if busy else self._watch(queue.name, idle)
            if watch is not None:
                await asyncio.sleep(0)  # let the watch register its waiter first
            try:
                claimed = await self.store.job_claim(
                    JobClaim(
                        queue=queue.name,
                        limit=free,
                        worker_id=self.worker_id,
                        lease_seconds=self._config.lease_ms / 1000,
                    )
                )
                failures = 0
            except KetError as error:
                if watch is not None:
                    watch.cancel()
                failures += 1
                self._emit(
                    Event(
                        kind="poll_failed", tenant=self.tenant, queue=queue.name, error=str(error)
                    )
                )
                await self._sleep(min(poll_max * failures, 30.0))
                continue
            for job in claimed:
                self._launch(queue, job)
            busy = len(claimed) == free
            if busy:
                if watch is not None:
                    watch.cancel()
                idle = poll_min
                continue  # there may be more: claim again as soon as slots allow
            if claimed:
                idle = poll_min
            woken = await (watch or self._watch(queue.name, idle))
            idle = poll_min if woken else min(idle * 2, poll_max)

    def _watch(self, queue: str, timeout: float) -> asyncio.Task[bool]:
        return asyncio.ensure_future(self._wait_for_work(queue, timeout))

    async def _wait_for_work(self, queue: str, timeout: float) -> bool:
        """True when woken for `queue`; False on timeout or stop (cancellable at any point)."""
        if self._push is None:
            await self._sleep(timeout)
            return False
        waiting = asyncio.ensure_future(self._push.wait_for_jobs([queue], timeout))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([waiting, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not waiting.done():
                waiting.cancel()
                await asyncio.wait([waiting])  # let it unregister its waiter
        return not waiting.cancelled() and bool(waiting.result())

    def _launch(self, queue: _Queue, job: ClaimedJob) -> None:
        spec = self.catalog.jobs.get(job.name)
        entry = _Running(job=job, signal=AbortSignal())
        self._running[job.id] = entry
        queue.busy += 1
        entry.task = asyncio.ensure_future(self._execute(queue, entry, spec))

    async def _execute(self, queue: _Queue, entry: _Running, spec: JobSpec | None) -> None:
        job = entry.job
        started = time.perf_counter()
        try:
            if spec is None:  # rows of a job this deployment no longer ships
                reason = f"no job {job.name!r} in deployment {self.catalog.deployment!r}"
                result = Result(
                    settle=Settle(
                        id=job.id,
                        fence=job.fence,
                        outcome="discarded",
                        error=ErrorInfo(error=reason),
                    ),
                    kind="discarded",
                    error=reason,
                )
            else:
                if self.hooks.wanted("started"):
                    self._emit(_job_event("started", self.tenant, job))
                result = await run_attempt(
                    job, spec, entry.signal, self._contexts.for_job, self._executor
                )
            if result.settle is not None:
                self._outcomes.put_nowait(result.settle)
            self._report(job, result, started)
        except Exception:  # a bug in ket, not in the handler: never leave the slot taken
            log.exception("running job %s failed inside ket", job.id)
        finally:
            self._running.pop(job.id, None)
            queue.busy -= 1
            queue.freed.set()

    def _report(self, job: ClaimedJob, result: Result, started: float) -> None:
        kind = _REPORTED[result.kind]
        if self.hooks.wanted(kind):
            self._emit(
                Event(
                    kind=kind,
                    tenant=self.tenant,
                    job_id=job.id,
                    name=job.name,
                    queue=job.queue,
                    attempt=job.attempt,
                    duration_ms=round((time.perf_counter() - started) * 1000, 3),
                    error=result.error,
                )
            )

    # -- settling ---------------------------------------------------------------------------

    async def _settle_loop(self) -> None:
        """Write outcomes in batches until the None that stop() sends after the last one."""
        while True:
            first = await self._outcomes.get()
            batch, done = ([] if first is None else [first]), first is None
            while len(batch) < SETTLE_BATCH and not self._outcomes.empty():
                item = self._outcomes.get_nowait()
                if item is None:
                    done = True
                else:
                    batch.append(item)
            if batch:
                await self._write(batch)
            if done:
                return

    async def _write(self, batch: list[Settle]) -> None:
        delay, tries = 0.1, 0
        while True:
            try:
                await self.store.job_settle(batch)
                return
            except KetError as error:
                # the outcome must not be lost; if the store stays away, the leases expire and
                # the jobs are rescued, and these settlements are then refused by their fences
                tries += 1
                if self._stopping.is_set() and tries >= 5:
                    log.error(
                        "giving up settling %d jobs at shutdown: %s; their leases will "
                        "expire and they will be rescued",
                        len(batch),
                        error,
                    )
                    return
                log.warning("could not settle %d jobs: %s; retrying", len(batch), error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    # -- background services ----------------------------------------------------------------

    async def _every(
        self, seconds: float, action: Callable[[], Awaitable[None]], *, at_once: bool = False
    ) -> None:
        if not at_once:
            await self._sleep(seconds * random.uniform(0.5, 1.0))
        while not self._stopping.is_set():
            try:
                await action()
            except KetError as error:
                log.warning("%s failed: %s", action.__name__.strip("_"), error)
            await self._sleep(seconds)

    async def _heartbeat(self) -> None:
        leases = [Lease(id=r.job.id, fence=r.job.fence) for r in self._running.values()]
        if not leases:
            return
        result = await self.store.job_heartbeat(
            Heartbeat(leases=leases, lease_seconds=self._config.lease_ms / 1000)
        )
        for job_id in result.lost:
            if (entry := self._running.get(job_id)) is not None:
                entry.signal.abort("lease lost")
        for job_id in result.cancel_requested:
            if (entry := self._running.get(job_id)) is not None:
                entry.signal.abort("cancelled")

    async def _rescue(self) -> None:
        for rescued in await self.store.job_rescue():
            if self.hooks.wanted("rescued"):
                self._emit(
                    Event(
                        kind="rescued",
                        tenant=self.tenant,
                        job_id=rescued.id,
                        name=rescued.name,
                        queue=rescued.queue,
                        attempt=rescued.attempt,
                        detail=f"now {rescued.state}; lease of {rescued.worker_id} expired",
                    )
                )

    async def _sweep(self) -> None:
        await sweep(self.store, self.catalog, tenant=self.tenant, hooks=self.hooks)

    async def _prune(self) -> None:
        params = Prune(older_than_seconds=self._retention, limit=10_000)
        while await self.store.job_prune(params) == params.limit:
            await asyncio.sleep(0)

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    def _emit(self, event: Event) -> None:
        self.hooks.emit(event)


def _job_event(kind: Kind, tenant: str, job: ClaimedJob) -> Event:
    return Event(
        kind=kind, tenant=tenant, job_id=job.id, name=job.name, queue=job.queue, attempt=job.attempt
    )
