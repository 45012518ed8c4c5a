"""A queue's claim loop: claim jobs for the free slots (and a small prefetch buffer while jobs
are short), launch them, and wait for a wake-up (or the adaptive poll interval) when the queue
runs dry.

Prefetch: while the queue's recent jobs take less than PREFETCH_BELOW_SECONDS, a claim also
takes up to `slots` jobs, and at least PREFETCH_AT_LEAST, that wait here for a slot, so a claim
and a settle cover many jobs even at a small concurrency (32 such jobs are at most about 1.6 s of
work at one slot). They are leased and heartbeated like running work, started the moment a
slot frees, and handed back at once when the worker stops. Long jobs get no prefetch: a job must
not wait behind a long one in this worker while another worker is idle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ket.declare.worker import WorkerConfig
from ket.runtime.events import Event, Hooks
from ket.runtime.flag import Flag
from ket.runtime.lease import Attempt, Attempts
from ket.runtime.supervisor import Supervisor, backoff
from ket.store.contract import JobStore, PacedStore, PushStore
from ket.store.types import ClaimLimits, JobClaim
from ket.store.waiting import Sent, sending, unsent
from ket.store.watch import JobWatch

if TYPE_CHECKING:
    from ket.runtime.burst import Burst

Launch = Callable[["QueueSlots"], None]

# Prefetch only while the queue's jobs take less than this on average (recent jobs weigh most).
PREFETCH_BELOW_SECONDS = 0.05
_WEIGHT = 0.2  # of the newest job in the running average of durations
# How many claimed jobs may wait for a slot at least, at any concurrency (while jobs are short).
PREFETCH_AT_LEAST = 32
# A paced queue's first claim waits for the tenant's first visit at most this long past the
# start spread.
FIRST_VISIT_SLACK_SECONDS = 1.0


@dataclass(eq=False, slots=True)
class QueueSlots:
    """A queue's concurrency in this worker: its slots, the jobs running in them, and the
    claimed jobs waiting for one."""

    name: str
    slots: int
    busy: int = 0
    ready: list[Attempt] = field(default_factory=list)  # a deque is 600 bytes empty
    freed: Flag = field(default_factory=Flag)
    # the running average of job durations; None until a job ended (no prefetch before)
    average_seconds: float | None = None

    @property
    def prefetch(self) -> int:
        """How many claimed jobs may wait for a slot."""
        short = self.average_seconds is not None and self.average_seconds < PREFETCH_BELOW_SECONDS
        return max(self.slots, PREFETCH_AT_LEAST) if short else 0

    @property
    def room(self) -> int:
        """How many jobs a claim may take now."""
        return self.slots + self.prefetch - self.busy - len(self.ready)

    def release(self, seconds: float) -> None:
        """A job ended after `seconds`: its slot is free."""
        self.busy -= 1
        average = self.average_seconds
        self.average_seconds = (
            seconds if average is None else average + _WEIGHT * (seconds - average)
        )
        self.freed.set()


class QueueLoop:
    """Claims and launches one queue's jobs until the worker stops."""

    __slots__ = (
        "_attempts",
        "_burst",
        "_config",
        "_due",
        "_first_claim_within",
        "_hooks",
        "_idle",
        "_launch",
        "_limits",
        "_paced",
        "_parked",
        "_push",
        "_stopping",
        "_store",
        "_supervisor",
        "_worker_id",
        "name",
        "queue",
    )

    def __init__(
        self,
        queue: QueueSlots,
        *,
        store: JobStore,
        config: WorkerConfig,
        worker_id: str,
        attempts: Attempts,
        launch: Launch,
        supervisor: Supervisor,
        hooks: Hooks,
        stopping: Flag,
        first_claim_within: float | None = None,
        burst: Burst | None = None,
        limits: ClaimLimits | None = None,
    ) -> None:
        """`first_claim_within`: the tenant's safety visit, which has every queue claim, comes
        within that many seconds of the start; the first claim waits for it (or for a hint),
        on the visit's connection, rather than come at once: a thousand tenants starting
        together (or taken over from a worker that died) would each open a connection for it
        at the same instant, and again for their visit. `burst`: a claim that comes back short
        waits for the next outcome instead (runtime/burst.py). `limits`: the queue's fleet-wide
        limits, which every claim keeps (catalog.claim_limits)."""
        self.queue = queue
        self.name = f"claim loop of queue {queue.name}"
        self._store = store
        # runtime_checkable isinstance is slow: decide once, not on every idle wait
        self._push: PushStore | None = store if isinstance(store, PushStore) else None
        self._paced: PacedStore | None = store if isinstance(store, PacedStore) else None
        self._config = config
        self._worker_id = worker_id
        self._attempts = attempts
        self._launch = launch
        self._supervisor = supervisor
        self._hooks = hooks
        self._stopping = stopping
        self._due: asyncio.Future[None] | None = None  # a `_when_due` under way
        self._first_claim_within = first_claim_within
        # the wait for work after the next claim that finds the queue dry, and the watch the
        # loop is parked on while it has nothing to do
        self._idle = config.poll_min_ms / 1000
        self._parked: JobWatch | None = None
        self._burst = burst
        self._limits = limits

    async def run(self) -> bool:
        """Claim until the worker stops (False), or until the queue has nothing to do (True):
        it is then parked on a watch for work, and holds no task until a wake-up or the
        watch's timeout keeps it again (`_woken`)."""
        parked = False
        try:
            parked = await self._claim_until_idle()
            return parked
        finally:
            if not parked and self._due is not None:
                self._due.cancel()

    def unpark(self) -> None:
        """The worker stops: a parked loop's watch ends, and nothing keeps it again."""
        watch, self._parked = self._parked, None
        if watch is not None:
            watch.close()
        if self._due is not None:
            self._due.cancel()

    async def _claim_until_idle(self) -> bool:
        queue, attempts = self.queue, self._attempts
        poll_min = self._config.poll_min_ms / 1000
        poll_max = self._config.poll_max_ms / 1000
        lease = self._config.lease_ms / 1000
        failures = 0
        busy = False  # the last claim filled every free slot: work is flowing
        burst = self._burst
        parked, self._parked = self._parked, None
        if self._first_claim_within is not None:
            within, self._first_claim_within = self._first_claim_within, None  # once
            # a wake-up lost to the race with a visit at the very start costs only this wait;
            # the wait beside the claim that follows is a paced one
            parked = await self._watch(within + FIRST_VISIT_SLACK_SECONDS)
            self._idle = self._pace(poll_min, poll_max)[1]
        # resumed (or the first claim's wait): the wait it parked on is over, or about to be
        if parked is not None and await self._waited(parked):
            return True
        while not self._stopping.is_set():
            idle = self._idle
            free = queue.room
            # while work flows with prefetch on, claim once a slot's worth of room is free, not
            # for every job that ends
            if free <= 0 or (busy and free < queue.prefetch):
                queue.freed.clear()
                await queue.freed.wait()
                continue
            if not attempts.reachable.is_set():  # fenced off: no claims until it answers
                await _first(attempts.reachable.wait(), self._stopping.wait())
                continue
            # When idle, watch before claiming: a job committed while the claim is in flight
            # must wake the wait that follows, not slip between the claim and the wait. While
            # work flows the claim is almost never short, so skip the watch on that path.
            watch = None if busy or burst is not None else await self._watch(idle)
            epoch = 0 if burst is None else burst.epoch
            try:
                claimed = await self._claim(free, lease)
            except Exception as error:
                if watch is not None:
                    watch.close()
                failures += 1
                self._failed(error)
                await self._supervisor.sleep(backoff(poll_max, failures))
                continue
            if failures:
                failures = 0
                self._supervisor.repeats.recovered(self._supervisor.where(self.name))
            busy = claimed == free
            if busy:
                if watch is not None:
                    watch.close()
                self._idle = poll_min
                continue  # there may be more: claim again as soon as slots allow
            if burst is not None:  # nothing more due now, unless a running job enqueues it
                await burst.short(queue.name, epoch)
                continue
            # A queue woken by hints (the control channel, its listener up) claims when told: a
            # claim that took less than it could saw every job committed before it began, and
            # a later one comes with a hint, a due time or the tenant's visit. It waits for
            # those rather than polling again from poll_min: with a thousand tenants, that
            # ladder of dry claims after every job made most of the worker's connections.
            ceiling, rest = self._pace(poll_min, poll_max)
            # never past the ceiling: a wait paced for hints (minutes) must not carry over to
            # the polls that take over when the listener is lost
            self._idle = rest if claimed else min(max(idle, rest), ceiling)
            watch = watch or await self._watch(self._idle)
            if self._stopping.is_set():
                watch.close()
                return False
            if ceiling > poll_max and not watch.woken.done():
                # waits may be long: learn when the next job is due, beside the wait, so that
                # a wake-up never waits for that statement's connection
                self._learn_when_due()
            if await self._waited(watch):
                return True
        return False

    async def _waited(self, watch: JobWatch) -> bool:
        """The claim loop waits on `watch`: True when it parked on it (or on a later one), the
        loop to be kept again when it ends; False when the wait is over and the loop claims
        again, `self._idle` paced for the wait after that claim."""
        poll_min = self._config.poll_min_ms / 1000
        poll_max = self._config.poll_max_ms / 1000
        if not watch.woken.done():
            if self._stopping.is_set():
                watch.close()
                return False
            self._parked = watch
            watch.woken.add_done_callback(self._woken)
            return True
        woken = watch.outcome()
        if woken and self._paced is not None and not self._paced.woken_since_claim(self.queue.name):
            # the wake-up came before the last claim's statement began (that claim saw its
            # job): after a tick, the tick jobs' wake-ups reach a claim still waiting for a
            # connection, and claiming again for each would only add to the wait of every
            # tenant. Wait for the next one instead.
            return await self._waited(await self._watch(self._idle))
        # paced anew: the listener may have been lost during the wait (which woke it), and
        # the watch made before the next claim must then be a poll's, not minutes long
        ceiling, rest = self._pace(poll_min, poll_max)
        self._idle = rest if woken else min(self._idle * 2, ceiling)
        return False

    def _woken(self, woken: asyncio.Future[bool]) -> None:
        """The watch a parked loop waits on is over: keep the loop again."""
        parked = self._parked
        if parked is None or parked.woken is not woken:  # unparked: the worker stops
            return
        if self._stopping.is_set():
            self.unpark()
            return
        self._supervisor.keep(self.name, self.run)

    def _pace(self, poll_min: float, poll_max: float) -> tuple[float, float]:
        """The longest wait for work now (`poll_max`, or for ever while hints come: `idle_poll`),
        and the wait after a claim that found work (`poll_min`, or that same)."""
        ceiling = poll_max if self._paced is None else self._paced.idle_poll(poll_max)
        return ceiling, ceiling if ceiling > poll_max else poll_min

    async def _claim(self, free: int, lease: float) -> int:
        """Claim up to `free` jobs and launch them (or queue them for a slot); how many came.
        The jobs are not kept in the claim loop's frame, which outlives them while the queue
        waits for work (a thousand idle tenants' last jobs, with their inputs)."""
        queue, attempts = self.queue, self._attempts
        sent = Sent(attempts.clock)  # moved to when its connection was in hand
        claim = JobClaim(
            queue=queue.name,
            limit=free,
            worker_id=self._worker_id,
            lease_seconds=lease,
            limits=self._limits,
        )
        token = sending(sent)
        try:
            claimed = await self._store.job_claim(claim)
        finally:
            unsent(token)  # the attempts launched below must not inherit it
        for job in claimed:
            queue.ready.append(attempts.add(job, sent.at))
        self._launch(queue)
        return len(claimed)

    def _learn_when_due(self) -> None:
        """`_when_due` in a task of its own, one at a time (a wait for a connection within a
        spent budget may outlast the wait for work)."""
        if self._due is None:
            self._due = asyncio.ensure_future(self._when_due())
            self._due.add_done_callback(self._learnt)

    def _learnt(self, task: asyncio.Future[None]) -> None:
        if self._due is task:
            self._due = None  # not kept once done: a thousand tenants' finished tasks add up

    async def _when_due(self) -> None:
        """Have the store wake this queue when its next job is due; a failure is logged (rate
        limited) and costs only the wake-up: the tenant's safety visit still comes."""
        assert self._paced is not None
        try:
            await self._paced.wake_when_due(self.queue.name)
        except Exception as error:
            where = self._supervisor.where(f"due times of queue {self.queue.name}")
            self._supervisor.repeats.failure(where, error, level=logging.WARNING)

    def _failed(self, error: Exception) -> None:
        """A failed claim: a poll_failed event for hooks, a rate-limited log line."""
        where = self._supervisor.where(self.name)
        self._supervisor.repeats.failure(where, error)
        if self._hooks.wanted("poll_failed"):
            event = Event(
                kind="poll_failed",
                tenant=self._supervisor.tenant or "",
                queue=self.queue.name,
                error=str(error),
            )
            self._hooks.emit(event, logged=False)

    async def _watch(self, timeout: float) -> JobWatch:
        """A watch for work on this queue, registered when this returns, which times out after
        `timeout` seconds. A store that sends no wake-ups, or whose wake-ups fail (logged,
        limited), is polled: the watch is a timer alone."""
        if self._push is not None:
            try:
                return await self._push.watch_for_jobs([self.queue.name], timeout)
            except Exception as error:  # wake-ups are hints: poll meanwhile, and say so
                where = self._supervisor.where(f"wake-ups of queue {self.queue.name}")
                self._supervisor.repeats.failure(where, error, level=logging.WARNING)
        return JobWatch.timed(timeout)


async def _first(*waits: object) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
