"""The pruner: terminal jobs past retention are deleted, a bounded batch at a time."""

from __future__ import annotations

import asyncio

from ket.store.contract import JobStore
from ket.store.types import Prune

PRUNE_EVERY_SECONDS = 300.0
RETENTION_SECONDS = 7 * 86_400.0
PRUNE_BATCH = 10_000


class PruneService:
    """Deletes completed, discarded and cancelled jobs older than the retention."""

    name = "prune"

    def __init__(
        self,
        store: JobStore,
        *,
        retention_seconds: float = RETENTION_SECONDS,
        interval: float = PRUNE_EVERY_SECONDS,
    ) -> None:
        self._store = store
        self._params = Prune(older_than_seconds=retention_seconds, limit=PRUNE_BATCH)
        self.interval = interval

    async def tick(self) -> None:
        while await self._store.job_prune(self._params) == self._params.limit:
            await asyncio.sleep(0)  # let the jobs run between batches
