"""The safety visit of a tenant whose wake-ups come as hints.

With several tenants on PostgreSQL, a worker hears of new jobs through the control channel
(ket.wakeup.control_channel) and of due ones from its own timers, so no queue polls. What a
hint cannot tell is covered by one visit per tenant, on one connection. Its one question
(`look`) says when the earliest lease ends and when each queue's next job is due: the jobs
whose lease expired are rescued; a queue with a job due now claims (a job enqueued with no
hint, a hint lost), and one with a job due later is woken then. An idle tenant's visit is
that one statement (the first visit has every queue claim: their first claims). Visits
come every `visit_every(served())` seconds, give or take a fifth, `served()` being how many
tenants the process serves: so the whole process makes about VISITS_PER_SECOND visits however
many tenants it serves. A visit that finds a running job comes back when its
lease ends, so a job whose worker died is rescued about when its lease expires. The visit
sweeps the tenant's schedules too, on the same connection, and its timer also brings the sweep
of each schedule tick: an idle tenant costs one connection a visit, not one more per sweep.
Pruning rides on the visits as well: a visit at least `prune.interval` after the last prune
deletes one batch of each finished state, and the next visit another while batches come back
full (a prune of its own would open a connection of its own every few minutes per tenant).
Its rescue follows runtime/rescue.py's rules: this worker's waiting outcomes first, and after the
database was away from this worker, a grace of one lease (its first write) before any rescue.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection
from typing import Protocol

from ket.runtime.events import Hooks
from ket.runtime.rescue import Hold, Recorded, rescue
from ket.store.contract import JobStore, PacedStore

# How often a tenant is visited at least (a job enqueued with no hint starts within this)...
VISIT_AT_LEAST_SECONDS = 30.0
# ... unless a process serves so many tenants that this many visits a second would be exceeded.
VISITS_PER_SECOND = 8.0
# A visit that found a running job comes back this long after the job's lease ends.
AFTER_LEASE_SECONDS = 1.0
# A timer may wake this much before its time: what is due by then is done now.
EARLY_SECONDS = 0.01


def visit_every(tenants: int, at_least: float = VISIT_AT_LEAST_SECONDS) -> float:
    """The seconds between two visits of a tenant when a process serves `tenants` of them
    (`at_least`: the interval with few tenants; the schedule sweep between ticks passes its
    own)."""
    return max(at_least, tenants / VISITS_PER_SECOND)


class VisitedStore(JobStore, PacedStore, Protocol):
    """A store the worker visits (both capabilities)."""


class Sweep(Protocol):
    """The tenant's schedule sweep (runtime/sweep.py), made with `between_ticks=False`."""

    async def tick(self) -> float | None: ...


class Pruner(Protocol):
    """The tenant's pruner (runtime/prune.py)."""

    interval: float

    async def batch(self) -> bool: ...


class VisitService:
    """Visits one tenant: rescue, then a claim on every queue; with a `sweep`, a schedule
    sweep too, and the sweeps of the schedules' ticks in between (one timer for both)."""

    name = "safety visit"

    def __init__(
        self,
        store: VisitedStore,
        hooks: Hooks,
        *,
        tenant: str,
        queues: Collection[str],
        served: Callable[[], int],
        sweep: Sweep | None = None,
        prune: Pruner | None = None,
        clock: Callable[[], float] = time.monotonic,
        recorded: Recorded | None = None,
        hold: Hold | None = None,
    ) -> None:
        """`sweep`: swept at every visit, on the visit's connection (a resumed schedule is
        seen then), and at each tick it asks for; so a thousand idle tenants open one
        connection each per visit, not one more per sweep between ticks. `prune`: pruned on
        the visits, every `prune.interval` seconds at least. `recorded` and `hold`: see
        runtime/rescue.py (without a hold, rescues are never held back)."""
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self._queues = tuple(queues)
        self._served = served
        self._sweep = sweep
        self._prune = prune
        self._clock = clock
        self._recorded = recorded
        self._hold = hold
        self._visit_at: float | None = None  # on `clock`; None: at the next tick
        self._sweep_at: float | None = None  # the next tick's sweep; None: none due
        # the first prune after a random part of its interval, as a service of its own would
        self._prune_at = clock() + (0.0 if prune is None else prune.interval) * random.uniform(
            0.5, 1.0
        )
        self._first = True  # the first visit has every queue claim
        self.interval = visit_every(served())

    async def tick(self) -> float:
        try:
            return await self._tick()
        except Exception:
            if self._hold is not None:
                self._hold.away()
            raise

    async def _tick(self) -> float:
        now = self._clock()
        # woken for a tick's sweep, with the visit not due: that sweep alone; else a visit
        # (and a sweep with it)
        sweep_due = self._sweep_at is not None and self._sweep_at <= now + EARLY_SECONDS
        visit_due = self._visit_at is None or self._visit_at <= now + EARLY_SECONDS
        # each due time counts from when its answer came
        visiting = visit_due or not sweep_due
        if visiting:
            delay = await self._visit()
            self._visit_at = self._clock() + delay
        if self._sweep is not None:
            due = await self._sweep.tick()
            self._sweep_at = None if due is None else self._clock() + due
        if self._prune is not None and visiting and self._prune_at <= now + EARLY_SECONDS:
            more = await self._prune.batch()
            # more left: the next visit prunes again
            self._prune_at = self._clock() + (0.0 if more else self._prune.interval)
        assert self._visit_at is not None
        wake = self._visit_at if self._sweep_at is None else min(self._visit_at, self._sweep_at)
        return max(wake - self._clock(), 0.0)

    async def _visit(self) -> float:
        """Rescue (when a lease has ended), wake the queues with work; the seconds until the
        next visit."""
        store = self._store
        # a visit rescues only when a lease has ended: most find none (three round trips
        # fewer than a rescue that finds nothing, BEGIN and COMMIT included)
        look = await store.look(self._queues)
        hold = self._hold
        if hold is not None and await hold.grace(store, tenant=self._tenant):
            look = await store.look(self._queues)  # back when the grace ends: see rescue.py
        elif look.lease_end is not None and look.lease_end <= 0:
            rescued = await rescue(store, self._hooks, tenant=self._tenant, recorded=self._recorded)
            if rescued is None:  # the outcomes could not be recorded: the database is away
                if hold is not None:
                    hold.away()
            else:
                look = await store.look(self._queues)  # what the rescue made runnable
        # they claim on the connection the visit just used
        if self._first:
            self._first = False
            store.wake(self._queues)
        else:
            now = [queue for queue, left in look.due.items() if left <= 0]
            if now:
                store.wake(now)
        for queue, left in look.due.items():
            if left > 0:
                store.wake_in(queue, left)
        ends = look.lease_end
        self.interval = visit_every(self._served())
        delay = self.interval * random.uniform(0.8, 1.2)
        return delay if ends is None else min(delay, ends + AFTER_LEASE_SECONDS)
