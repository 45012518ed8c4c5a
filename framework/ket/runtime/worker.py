"""The worker for one tenant database: claim -> run -> settle, plus the background services.

It only composes: each queue's claim loop (runtime/queue.py) launches claimed jobs through the
per-job step (runtime/runner.py); outcomes go to the settler (runtime/settler.py); heartbeats and
the lease guard (runtime/lease.py), rescue, schedule sweeps and pruning (or, for a tenant woken
by hints, the safety visit of runtime/visit.py, which brings all three) and vacuuming run beside
them, and all of them run under the supervisor (runtime/supervisor.py), which owns the error
policy; the heartbeat and lease guard under a second one, stopped only once the running work is
over. The heartbeat, the lease guard and the vacuumer tick only while attempts run, so an idle
tenant sets no timers for them.

`stop()` stops claiming, lets running work finish within the grace period, then aborts it
(reason `shutdown`) and hands unfinished jobs back at once. `hand_back_now()` is the second
signal's path: abort everything, hand back what answers within a moment, return.

A burst worker (`ket worker --burst`, runtime/burst.py) runs the same loops, runner and settler,
with the heartbeat and lease guard, but rescues and sweeps once at the start and runs no other
service; `burst.done` is set once it has run everything due (or its start failed), and its
owner then stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from ket.catalog import Catalog
from ket.declare.worker import WorkerConfig
from ket.runtime.burst import Burst
from ket.runtime.contexts import Contexts
from ket.runtime.events import Hooks
from ket.runtime.flag import Flag
from ket.runtime.lease import Attempt, Attempts, HeartbeatService, LeaseGuard
from ket.runtime.minutes import MinuteService
from ket.runtime.outcome import describe
from ket.runtime.prune import PruneService
from ket.runtime.queue import QueueLoop, QueueSlots
from ket.runtime.rescue import Hold, RescueService, rescue
from ket.runtime.runner import ABORT_GRACE_SECONDS, JobRunner, Result
from ket.runtime.settler import Settler
from ket.runtime.supervisor import Repeats, Supervisor
from ket.runtime.sweep import SWEEPS_PER_SECOND, SweepService
from ket.runtime.sweep import sweep as sweep_schedules
from ket.runtime.threads import OnDemandThreads
from ket.runtime.vacuum import VacuumService
from ket.runtime.visit import VisitService
from ket.store.contract import JobStore, MinuteStore, PacedStore, VacuumStore
from ket.store.types import ErrorInfo, Settle

log = logging.getLogger("ket.worker")

T = TypeVar("T")

# Connections a tenant worker's own services may hold at once besides its running jobs: one claim
# per queue, and the settler, heartbeat, rescue, sweep, prune and vacuum. The minute count shares
# theirs: one short transaction a minute.
SERVICE_CONNECTIONS = 6
# A VACUUM reads the table's indexes whole: minutes for a table of many millions of rows.
VACUUM_TIMEOUT_SECONDS = 1_800.0


def connections_needed(config: WorkerConfig) -> int:
    """The pool a tenant worker needs so that its services always get a connection: one per
    job slot (a handler in `ctx.tx` holds one), one per queue's claim loop, and the services."""
    return sum(config.queues.values()) + len(config.queues) + SERVICE_CONNECTIONS


def loop_connections(config: WorkerConfig) -> int:
    """Of those, the connections of the worker's own loops and services, each holding one for
    a statement or a short transaction: the claim loops, the settler, heartbeat, rescue, sweep,
    prune and vacuum (on PostgreSQL the store's lane serves them, and the handlers' enqueues
    and sent-ledger calls); the rest are the job slots' (a handler in `ctx.tx` holds one)."""
    return len(config.queues) + SERVICE_CONNECTIONS


class TenantWorker:
    """Runs one tenant's jobs from one store until stopped."""

    def __init__(
        self,
        *,
        store: JobStore,
        catalog: Catalog,
        tenant: str,
        worker_id: str,
        contexts: Contexts,
        executor: Executor | None = None,
        hooks: Hooks | None = None,
        repeats: Repeats | None = None,
        served: Callable[[], int] | None = None,
        fleet: Callable[[], int] | None = None,
        together: float | None = None,
        burst: bool = False,
    ) -> None:
        """`served`: how many tenants the process serves now, which paces the safety visits;
        `fleet`: how many the worker processes sharing them serve together (the registry's),
        which spreads the schedule sweeps. None: this one. `together`: how many tenants the
        worker processes start with this one, which spreads their first visits (None: the
        fleet's). `burst`: run what is due, then say so (`self.burst.done`)."""
        self.store = store
        self.catalog = catalog
        self.tenant = tenant
        self.worker_id = worker_id
        self.hooks = hooks or Hooks()
        config = self._config = catalog.worker
        # Plain handlers run in threads: a worker process's fleet gives every tenant its turn
        # at the process's HandlerThreads (runtime/threads.py); a tenant worker made alone
        # gets one per slot (a slot stays taken while its thread runs).
        self._own_executor = executor is None
        self._executor = executor or OnDemandThreads(
            max_workers=max(1, sum(config.queues.values())), thread_name_prefix=f"ket-{tenant}"
        )
        self._stopping = Flag()
        self.supervisor = Supervisor(tenant=tenant, stopping=self._stopping, repeats=repeats)
        # The heartbeat and the lease guard run until the running work is over, not only until
        # claiming stops: a job that finishes within the shutdown grace keeps its lease (else,
        # with a grace longer than what is left of the lease, another worker rescues it and its
        # outcome is refused), and one that does not is still aborted before its lease ends.
        self._leases = Supervisor(tenant=tenant, stopping=Flag(), repeats=repeats)
        self.attempts = Attempts(lease_seconds=config.lease_ms / 1000)
        self._contexts = contexts
        self.runner = JobRunner(
            catalog=catalog,
            contexts=contexts,
            executor=self._executor,
            hooks=self.hooks,
            tenant=tenant,
        )
        self.burst = None if not burst else Burst(config.queues, self.attempts, self.runner.report)
        report = self.runner.report if self.burst is None else self.burst.report
        # a write stuck on a silent connection is abandoned within the heartbeat's bound
        self.settler = Settler(
            store,
            self._settled(report),
            self.supervisor,
            timeout=self.attempts.lease_seconds / 3,
        )
        self._queues = {q: QueueSlots(q, n) for q, n in config.queues.items()}
        self._loops: list[QueueLoop] = []
        self._served = served or (lambda: 1)
        self._fleet = fleet or self._served
        self._together = together

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the queue loops, the settler and the services on the running loop."""
        # ctx.progress from a plain handler's thread hands its event to this loop
        self._contexts.progress.attach(asyncio.get_running_loop())
        if self.burst is not None:
            self._start_burst()
            return
        sup, store, attempts = self.supervisor, self.store, self.attempts
        first = self._start_spread()
        # a tenant woken by hints: its safety visit rescues, has the queues claim and sweeps
        visited = store if isinstance(store, PacedStore) and store.paced else None
        sup.keep(self.settler.name, self.settler.run)
        # the first claim comes with the first visit (the visit has every queue claim)
        self._keep_queues(first_claim_within=None if visited is None else first)
        self._keep_leases()
        watched = attempts.watched
        sweep = SweepService(
            store,
            self.catalog,
            self.hooks,
            tenant=self.tenant,
            served=self._served,
            fleet=self._fleet,
            between_ticks=visited is None,
        )
        prune = PruneService(store, retention_ms=self._config.retention_ms)
        if visited is not None:
            visit = VisitService(
                visited,
                self.hooks,
                tenant=self.tenant,
                queues=self._queues,
                served=self._served,
                sweep=sweep,
                prune=prune,
                recorded=self.settler.recorded,
                hold=Hold(attempts.lease_seconds),
            )
            # at once: a tenant taken over from a worker that died has its jobs rescued when
            # their leases end, not a whole visit interval later
            sup.every(
                visit,
                at_once=True,
                first_within=first,
                timeout=max(attempts.lease_seconds, 5.0),
            )
        else:
            # retried at its interval through an outage, not backed off: its first write after
            # it is the grace (rescue.py), and a dead worker's jobs wait for that grace to end
            sup.every(
                RescueService(
                    store,
                    self.hooks,
                    tenant=self.tenant,
                    interval=attempts.lease_seconds,
                    recorded=self.settler.recorded,
                ),
                patience=attempts.lease_seconds,
            )
            sup.every(sweep, at_once=True, first_within=first)
            sup.every(prune, timeout=120.0)
        if isinstance(store, VacuumStore):
            vacuum = VacuumService(store, attempts, tenant=self.tenant)
            sup.every(vacuum, timeout=VACUUM_TIMEOUT_SECONDS, gate=watched)
        if isinstance(store, MinuteStore):
            sup.every(MinuteService(store, attempts), timeout=60.0)

    def _start_burst(self) -> None:
        """A burst: the settler and the leases' services as always; expired leases rescued and
        the schedules swept once (a burst run from cron may be the only worker there is), then
        the queue loops; no other service. A start that fails gives the tenant up."""
        assert self.burst is not None
        self.supervisor.keep(self.settler.name, self.settler.run)
        self._keep_leases()
        timeout = max(self.attempts.lease_seconds, 30.0)
        start, failed = self._begin_burst, self.burst.give_up
        self.supervisor.once("burst start", start, timeout=timeout, failed=failed)

    async def _begin_burst(self) -> None:
        assert self.burst is not None
        await rescue(self.store, self.hooks, tenant=self.tenant)
        await sweep_schedules(self.store, self.catalog, tenant=self.tenant, hooks=self.hooks)
        self._keep_queues(first_claim_within=None)  # the database answered: claim
        self.burst.swept()

    def _keep_queues(self, *, first_claim_within: float | None) -> None:
        """A claim loop for each queue, under the supervisor."""
        for queue in self._queues.values():
            loop = QueueLoop(
                queue,
                store=self.store,
                config=self._config,
                worker_id=self.worker_id,
                attempts=self.attempts,
                launch=self._launch,
                supervisor=self.supervisor,
                hooks=self.hooks,
                stopping=self._stopping,
                first_claim_within=first_claim_within,
                burst=self.burst,
                limits=self.catalog.claim_limits.get(queue.name),
            )
            self._loops.append(loop)
            self.supervisor.keep(loop.name, loop.run)

    def _keep_leases(self) -> None:
        """The heartbeat and the lease guard, ticking while attempts run (or the database is
        to be probed)."""
        attempts = self.attempts
        heartbeat = HeartbeatService(self.store, attempts, self._contexts.progress)
        self._leases.every(
            heartbeat,
            timeout=heartbeat.interval,
            gate=attempts.watched,
            patience=heartbeat.interval,  # leases are kept at once when the database returns
        )
        self._leases.every(LeaseGuard(attempts, tenant=self.tenant), gate=attempts.watched)

    def _start_spread(self) -> float:
        """Within how many seconds this tenant's first visit and sweep (and, when it is woken
        by hints, its queues' first claims, which come with the visit) come: tenants started
        together (a fleet starting, a dead worker's tenants taken over) spread out at the pace
        of the sweeps after a tick, `together / SWEEPS_PER_SECOND` seconds, within half a
        lease, rather than all asking for a connection at once (a thousand of them kept a
        budget of 20 busy for over 30 s). A count known before the first of them starts, not
        the count started so far: the fleet's when a fleet starts, a dead worker's share when
        its tenants are taken over (so that they are not spread over the fleet's 15 s, when
        their new jobs have waited for a new worker already)."""
        together = self._fleet() if self._together is None else self._together
        return min(together / SWEEPS_PER_SECOND, self.attempts.lease_seconds / 2)

    async def stop(self, grace_seconds: float | None = None) -> None:
        """Stop claiming; wait for running work up to the grace, then abort and hand it back."""
        grace = self._config.shutdown_grace_ms / 1000 if grace_seconds is None else grace_seconds
        self._stopping.set()
        for loop in self._loops:
            loop.unpark()
        for queue in self._queues.values():
            queue.freed.set()
            self._launch(queue)  # hands back the claimed jobs that wait for a slot
        await self._wait_running(grace)
        for attempt in self.attempts:
            attempt.signal.abort("shutdown")
        # async handlers are cancelled, and plain ones handed back, after the abort grace
        await self._wait_running(ABORT_GRACE_SECONDS + 1.0)
        for attempt in self.attempts:  # whatever still runs is handed back now
            if attempt.task is not None:
                attempt.task.cancel()
        await self._wait_running(1.0)
        await self.settler.close()
        await self.supervisor.stop()
        await self._leases.stop()
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def hand_back_now(self, timeout: float) -> None:
        """Abort everything and hand back what was running, within `timeout` seconds."""
        self._stopping.set()
        for loop in self._loops:
            loop.unpark()
        running = list(self.attempts)
        for attempt in running:
            attempt.signal.abort("shutdown")
        back = [Settle(id=a.job.id, fence=a.job.fence, outcome="snoozed") for a in running]
        if back:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.store.job_settle(back), timeout)

    def slots(self) -> dict[str, tuple[int, int]]:
        """By queue: the attempts running in this worker now, and its slots."""
        return {name: (queue.busy, queue.slots) for name, queue in self._queues.items()}

    @property
    def running(self) -> int:
        """How many attempts are running in this worker now (not the claimed jobs that wait
        for a slot)."""
        return sum(queue.busy for queue in self._queues.values())

    async def _wait_running(self, seconds: float) -> None:
        tasks = [a.task for a in self.attempts if a.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=seconds)

    # -- one job ----------------------------------------------------------------------------

    def _settled(self, report: Callable[[Result, bool], None]) -> Callable[[Result, bool], None]:
        """`report`, after which the attempt's lease is no longer kept: its outcome is recorded
        (or refused by its fence)."""
        attempts, progress = self.attempts, self._contexts.progress

        def recorded(result: Result, applied: bool) -> None:
            attempts.settled(result.job.id)
            progress.forget(result.job.id)  # a report no heartbeat wrote goes with the attempt
            report(result, applied)

        return recorded

    def _launch(self, queue: QueueSlots) -> None:
        """Start the queue's claimed jobs while it has free slots."""
        loop = asyncio.get_running_loop()
        stopping = self._stopping.is_set()  # then every waiting job goes back, slots or not
        while queue.ready and (stopping or queue.busy < queue.slots):
            attempt = queue.ready.pop(0)
            if stopping or attempt.signal.aborted:  # over before it started
                self.attempts.finish(attempt.job.id)  # leased until handed back
                self.settler.put(self.runner.abandoned(attempt.job, attempt.signal))
                continue
            queue.busy += 1
            # the attempt's own task: an async handler runs in it (see JobRunner.run)
            attempt.task = loop.create_task(self._run(queue, attempt))

    async def _run(self, queue: QueueSlots, attempt: Attempt) -> None:
        job = attempt.job
        result: Result | None = None
        try:
            result = await self.runner.run(job, attempt.signal)
        except asyncio.CancelledError:  # stop() stopped waiting for it
            result = self.runner.abandoned(job, attempt.signal)
        except Exception as error:  # a bug in ket, not in the handler: record it, go on
            log.exception("running job %s (%s) failed inside ket", job.id, job.name)
            reason = f"ket failed running the job: {describe(error)}"
            settle = Settle(
                id=job.id,
                fence=job.fence,
                outcome="retryable",
                delay_seconds=10.0,
                error=ErrorInfo(error=reason),
            )
            result = Result(job=job, settle=settle, kind="failed", error=reason)
        finally:
            if result is not None and result.settle is not None:
                # over, its outcome not recorded yet: the heartbeat keeps its lease meanwhile
                self.attempts.finish(job.id)
            else:
                self.attempts.remove(job.id)
            # the runner timed the attempt; its duration steers the queue's prefetch
            queue.release(result.duration_ms / 1000 if result is not None else 0.0)
        self.settler.put(result)
        self._launch(queue)
