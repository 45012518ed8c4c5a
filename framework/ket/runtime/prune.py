"""The pruner: terminal jobs past retention are deleted, a bounded batch at a time."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping

from ket.declare.worker import Finished
from ket.store.contract import JobStore
from ket.store.types import Prune

PRUNE_EVERY_SECONDS = 300.0
PRUNE_BATCH = 10_000


class PruneService:
    """Deletes completed, discarded and cancelled jobs older than their state's retention
    (`retention_ms` by state, the worker option; a state that is absent or None is kept)."""

    name = "prune"

    def __init__(
        self,
        store: JobStore,
        *,
        retention_ms: Mapping[Finished, int | None],
        interval: float = PRUNE_EVERY_SECONDS,
    ) -> None:
        self._store = store
        self._batches = prune_batches(retention_ms)
        self.interval = interval

    async def tick(self) -> None:
        while await self.batch():
            await asyncio.sleep(0)  # let the jobs run between batches

    async def batch(self) -> bool:
        """One batch of each state (a tenant's safety visit prunes so, runtime/visit.py);
        True when one came back full: more is left."""
        more = False
        for params in self._batches:
            more = await self._store.job_prune(params) == params.limit or more
        return more


def prune_batches(retention_ms: Mapping[Finished, int | None]) -> tuple[Prune, ...]:
    """One batch per finished state that is pruned at all, each after its own retention (the
    same tuple for every tenant of a worker: they share the deployment's retention)."""
    return _batches(tuple(sorted(retention_ms.items())))


@functools.lru_cache(maxsize=64)
def _batches(retention_ms: tuple[tuple[Finished, int | None], ...]) -> tuple[Prune, ...]:
    return tuple(
        Prune(older_than_seconds=ms / 1000, limit=PRUNE_BATCH, states=(state,))
        for state, ms in retention_ms
        if ms is not None
    )
