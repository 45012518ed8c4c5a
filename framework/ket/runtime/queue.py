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
from ket.store.types import JobClaim

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
    ) -> None:
        """`first_claim_within`: the tenant's safety visit, which has every queue claim, comes
        within that many seconds of the start; the first claim waits for it (or for a hint),
        on the visit's connection, rather than come at once: a thousand tenants starting
        together (or taken over from a worker that died) would each open a connection for it
        at the same instant, and again for their visit. `burst`: a claim that comes back short
        waits for the next outcome instead (runtime/burst.py)."""
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
        self._burst = burst

    async def run(self) -> None:
        try:
            await self._claim_until_stopped()
        finally:
            if self._due is not None:
                self._due.cancel()

    async def _claim_until_stopped(self) -> None:
        queue, attempts = self.queue, self._attempts
        poll_min = self._config.poll_min_ms / 1000
        poll_max = self._config.poll_max_ms / 1000
        lease = self._config.lease_ms / 1000
        idle = poll_min
        failures = 0
        busy = False  # the last claim filled every free slot: work is flowing
        burst = self._burst
        if self._first_claim_within is not None:
            within, self._first_claim_within = self._first_claim_within, None  # once
            # a wake-up lost to the race with a visit at the very start costs only this wait
            await self._wait_for_work(within + FIRST_VISIT_SLACK_SECONDS)
            _, idle = self._pace(poll_min, poll_max)  # the wait beside the claim: a paced one
        while not self._stopping.is_set():
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
            # When idle, listen before claiming: a job committed while the claim is in flight
            # must wake the wait that follows, not slip between the claim and the wait. While
            # work flows the claim is almost never short, so skip the extra tasks on that path.
            watch = None if busy or burst is not None else self._watch(idle)
            if watch is not None:
                await asyncio.sleep(0)  # let the watch register its waiter first
            epoch = 0 if burst is None else burst.epoch
            try:
                claimed = await self._claim(free, lease)
            except Exception as error:
                if watch is not None:
                    watch.cancel()
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
                    watch.cancel()
                idle = poll_min
                continue  # there may be more: claim again as soon as slots allow
            if burst is not None:  # nothing more due now, unless a running job enqueues it
                await burst.short(queue.name, epoch)
                continue
            # A queue woken by hints (the control channel, its listener up) claims when told: a
            # claim that took less than it could saw every job committed before it began, and
            # a later one comes with a hint or a due time. It waits for those (or the backstop
            # poll) rather than polling again from poll_min: with a thousand tenants, that
            # ladder of dry claims after every job made most of the worker's connections.
            ceiling, rest = self._pace(poll_min, poll_max)
            # never past the ceiling: a wait paced for hints (minutes) must not carry over to
            # the polls that take over when the listener is lost
            idle = rest if claimed else min(max(idle, rest), ceiling)
            watch = watch or self._watch(idle)
            if self._stopping.is_set():
                # stopped during the claim: the supervisor's cancel may have been lost on the
                # way (Python 3.11's asyncio.wait_for drops one that meets its result), and the
                # wait below may last minutes
                watch.cancel()
                return
            if ceiling > poll_max and not watch.done():
                # waits may be long: learn when the next job is due, beside the wait, so that
                # a wake-up never waits for that statement's connection
                self._learn_when_due()
            woken = await watch
            if woken and self._paced is not None:
                woken = await self._unless_seen(idle)
            # paced anew: the listener may have been lost during the wait (which woke it), and
            # the watch begun before the next claim must then be a poll's, not minutes long
            ceiling, rest = self._pace(poll_min, poll_max)
            idle = rest if woken else min(idle * 2, ceiling)

    async def _claim(self, free: int, lease: float) -> int:
        """Claim up to `free` jobs and launch them (or queue them for a slot); how many came.
        The jobs are not kept in the claim loop's frame, which outlives them while the queue
        waits for work (a thousand idle tenants' last jobs, with their inputs)."""
        queue, attempts = self.queue, self._attempts
        sent = attempts.clock()
        claim = JobClaim(
            queue=queue.name, limit=free, worker_id=self._worker_id, lease_seconds=lease
        )
        claimed = await self._store.job_claim(claim)
        for job in claimed:
            queue.ready.append(attempts.add(job, sent))
        self._launch(queue)
        return len(claimed)

    def _pace(self, poll_min: float, poll_max: float) -> tuple[float, float]:
        """The longest wait for work now (`poll_max`, or the paced backstop while hints come),
        and the wait after a claim that found work (`poll_min`, or that backstop)."""
        ceiling = poll_max if self._paced is None else self._paced.idle_poll(poll_max)
        return ceiling, ceiling if ceiling > poll_max else poll_min

    async def _unless_seen(self, timeout: float) -> bool:
        """A wake-up came; if it came before the last claim's statement began (that claim saw
        its job), wait for the next one instead: after a tick, the tick jobs' wake-ups reach a
        claim still waiting for a connection, and claiming again for each would only add to
        the wait of every tenant. True when woken after the claim began."""
        assert self._paced is not None
        name = self.queue.name
        while not self._paced.woken_since_claim(name):
            watch = self._watch(timeout)
            await asyncio.sleep(0)  # its waiter is registered: nothing slips in between
            if self._paced.woken_since_claim(name):
                watch.cancel()
                return True
            if not await watch:
                return False
        return True

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
        limited) and costs only the wake-up: the safety poll still comes."""
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

    def _watch(self, timeout: float) -> asyncio.Task[bool]:
        return asyncio.ensure_future(self._wait_for_work(timeout))

    async def _wait_for_work(self, timeout: float) -> bool:
        """True when woken for this queue; False on timeout (cancellable anywhere). The stop
        signal does not end the wait: the loop claims nothing once it is set, and the
        supervisor's stop cancels the wait (a thousand idle tenants' queues would otherwise
        hold two more tasks each)."""
        if self._push is None:
            await self._supervisor.sleep(timeout)
            return False
        try:
            return await self._push.wait_for_jobs([self.queue.name], timeout)
        except Exception as error:  # wake-ups are hints: poll meanwhile, and say so (limited)
            where = self._supervisor.where(f"wake-ups of queue {self.queue.name}")
            self._supervisor.repeats.failure(where, error, level=logging.WARNING)
            return False


async def _first(*waits: object) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
