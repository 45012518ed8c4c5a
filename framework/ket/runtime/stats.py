"""Job stats for gauges: every served tenant's `job_stats`, read at a modest interval.

Gauges (jobs by state and queue, the oldest available and lease ages) come from the store's own
counts, read here every `interval` seconds by one service of the process, never per scrape and
never per job: a scrape only reads the last snapshot. A tenant whose read fails keeps its last
values, and the failure goes to the supervisor (logged, rate-limited, backed off); a tenant no
longer served drops out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from ket.errors import StoreError
from ket.runtime.outcome import describe
from ket.store.contract import JobStore, QueryableStore
from ket.store.types import ClaimLimits, JobStats

# At most this many tenants' stats are read at once (each takes one of its tenant's
# connections for a few milliseconds).
CONCURRENT_READS = 4

Snapshot = Mapping[str, JobStats]  # tenant -> its stats


class StatsService:
    """Reads the job stats of every tenant `stores()` lists and hands them to `publish`."""

    name = "job stats"

    def __init__(
        self,
        stores: Callable[[], Mapping[str, JobStore]],
        publish: Callable[[Snapshot], None],
        *,
        interval: float,
        limits: Mapping[str, ClaimLimits] | None = None,
    ) -> None:
        """`limits`: the queues' fleet-wide limits (catalog.claim_limits), whose held-back jobs
        the stats count."""
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self._stores = stores
        self._limits = limits or None
        self._publish = publish
        self.interval = interval
        self._last: dict[str, JobStats] = {}

    async def tick(self) -> None:
        stores = {
            name: store
            for name, store in self._stores().items()
            if isinstance(store, QueryableStore)
        }
        gate = asyncio.Semaphore(CONCURRENT_READS)

        async def read(store: QueryableStore) -> JobStats:
            async with gate:
                return await store.job_stats(self._limits)

        names = sorted(stores)
        results = await asyncio.gather(
            *(read(stores[name]) for name in names), return_exceptions=True
        )
        snapshot: dict[str, JobStats] = {}
        failed: list[str] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, JobStats):
                snapshot[name] = result
            elif isinstance(result, Exception):
                failed.append(f"tenant {name}: {describe(result)}")
                if name in self._last:  # stale beats a dip in the totals
                    snapshot[name] = self._last[name]
            else:
                raise result  # CancelledError and the like: not a failed read
        self._last = snapshot
        self._publish(snapshot)
        if failed:
            raise StoreError(f"could not read the job stats of {'; '.join(failed)}")
