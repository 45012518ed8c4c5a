"""Every tenant at a glance (`ket jobs stats --all-tenants`, the dashboard's Fleet page): per
tenant its jobs by state, the oldest due job's wait, the jobs discarded in the last hour and the
live workers serving it, so that an operator of many tenants finds the sick one in one look.

The tenants' stats are read a few at a time (FLEET_CONCURRENCY); a tenant whose database cannot
be read is a row saying why, never the end of the listing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ket.errors import KetError
from ket.store.contract import JobStore, QueryableStore
from ket.store.roster import SeenWorker
from ket.store.types import JOB_STATES

FLEET_CONCURRENCY = 8  # tenants whose stats are read at once
SORTS = ("tenant", "discarded", "oldest", "backlog", "workers")  # how a listing may be ordered


@dataclass(frozen=True, kw_only=True, slots=True)
class FleetRow:
    """One tenant: its jobs by state (all queues), the oldest due job's wait in seconds (None:
    none waits), the jobs discarded in the last hour, its live workers; or `problem`, the reason
    its stats could not be read (the other fields then empty)."""

    tenant: str
    counts: Mapping[str, int] = field(default_factory=dict)  # by state
    oldest_available_age: float | None = None
    discarded_last_hour: int = 0
    live_workers: int = 0
    problem: str | None = None

    @property
    def backlog(self) -> int:
        """The jobs waiting to run: available, scheduled and retryable."""
        return sum(self.counts.get(state, 0) for state in ("available", "scheduled", "retryable"))


OpenStore = Callable[[str, str], Awaitable[JobStore]]


async def fleet_rows(
    tenants: Mapping[str, str],
    open_store: OpenStore,
    workers: Sequence[SeenWorker] = (),
    *,
    close: bool = False,
) -> list[FleetRow]:
    """A row per tenant of `tenants` (name -> database URL), by name, from the store
    `open_store(name, url)` gives (closed after when `close`); `workers` are the roster's."""
    gate = asyncio.Semaphore(FLEET_CONCURRENCY)

    async def one(name: str, url: str) -> FleetRow:
        live = sum(
            1
            for worker in workers
            if not worker.stale and (worker.info.tenants is None or name in worker.info.tenants)
        )
        async with gate:
            try:
                store = await open_store(name, url)
            except KetError as error:
                return FleetRow(tenant=name, live_workers=live, problem=error.message)
            try:
                if not isinstance(store, QueryableStore):
                    return FleetRow(tenant=name, live_workers=live, problem="no job stats here")
                stats = await store.job_stats()
            except KetError as error:
                return FleetRow(tenant=name, live_workers=live, problem=error.message)
            finally:
                if close:
                    await store.close()
        counts: dict[str, int] = dict.fromkeys(JOB_STATES, 0)
        for (state, _), n in stats.counts.items():
            counts[state] += n
        return FleetRow(
            tenant=name,
            counts=counts,
            oldest_available_age=stats.oldest_available_age,
            discarded_last_hour=sum(stats.discarded_last_hour.values()),
            live_workers=live,
        )

    return list(await asyncio.gather(*[one(name, url) for name, url in sorted(tenants.items())]))


def sorted_rows(rows: Sequence[FleetRow], by: str) -> list[FleetRow]:
    """`rows` ordered for an operator: the sickest first by `by` (one of SORTS), a tenant that
    could not be read before all; `tenant` by name."""
    if by == "tenant":
        return sorted(rows, key=lambda row: row.tenant)
    keys: dict[str, Callable[[FleetRow], float]] = {
        "discarded": lambda row: row.discarded_last_hour,
        "oldest": lambda row: row.oldest_available_age or 0.0,
        "backlog": lambda row: row.backlog,
        "workers": lambda row: -row.live_workers,  # the fewest workers first
    }
    key = keys[by]
    return sorted(rows, key=lambda row: (row.problem is None, -key(row), row.tenant))
