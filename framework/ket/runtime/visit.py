"""The safety visit of a tenant whose wake-ups come as hints.

With several tenants on PostgreSQL, a worker hears of new jobs through the control channel
(ket.store.sql.control_channel) and of due ones from its own timers, so no queue polls. What a
hint cannot tell is covered by one visit per tenant, on one connection: rescue the jobs whose
lease expired, then have every queue claim (a job enqueued with no hint, a hint lost). Visits
come every `visit_every(served())` seconds, give or take a fifth, `served()` being how many
tenants the process serves: so the whole process makes about VISITS_PER_SECOND visits however
many tenants it serves. A visit that finds a running job comes back when its
lease ends, so a job whose worker died is rescued about when its lease expires.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from typing import Protocol

from ket.runtime.events import Hooks
from ket.runtime.rescue import rescue
from ket.store.contract import JobStore, PacedStore

# How often a tenant is visited at least (a job enqueued with no hint starts within this)...
VISIT_AT_LEAST_SECONDS = 30.0
# ... unless a process serves so many tenants that this many visits a second would be exceeded.
VISITS_PER_SECOND = 8.0
# A visit that found a running job comes back this long after the job's lease ends.
AFTER_LEASE_SECONDS = 1.0


def visit_every(tenants: int, at_least: float = VISIT_AT_LEAST_SECONDS) -> float:
    """The seconds between two visits of a tenant when a process serves `tenants` of them
    (`at_least`: the interval with few tenants; the schedule sweep between ticks passes its
    own)."""
    return max(at_least, tenants / VISITS_PER_SECOND)


class VisitedStore(JobStore, PacedStore, Protocol):
    """A store the worker visits (both capabilities)."""


class VisitService:
    """Visits one tenant: rescue, then a claim on every queue."""

    name = "safety visit"

    def __init__(
        self,
        store: VisitedStore,
        hooks: Hooks,
        *,
        tenant: str,
        queues: Collection[str],
        served: Callable[[], int],
    ) -> None:
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self._queues = tuple(queues)
        self._served = served
        self.interval = visit_every(served())

    async def tick(self) -> float:
        store = self._store
        await rescue(store, self._hooks, tenant=self._tenant)
        store.wake(self._queues)  # they claim on the connection the rescue just used
        ends = await store.lease_end()
        self.interval = visit_every(self._served())
        delay = self.interval * random.uniform(0.8, 1.2)
        return delay if ends is None else min(delay, ends + AFTER_LEASE_SECONDS)
