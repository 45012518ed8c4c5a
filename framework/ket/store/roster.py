"""The worker roster: which worker processes run, where and what, in the control database.

Each `ket worker` process reports itself (`WorkerInfo`) every few seconds and reads everyone's
rows back (`SeenWorker`); operators list them (`ket workers list`). Age is measured on the
control database's clock, so hosts whose clocks disagree still agree on who is stale.

    roster.worker_report(info, forget_after_seconds=86_400)   # upsert mine, drop the long gone
    [w for w in await roster.worker_list() if not w.stale]    # the live ones
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

# a worker not seen for this many of its own intervals is stale (gone, or cut off)
STALE_INTERVALS = 3
# rows not seen for this long are deleted by the live workers
FORGET_AFTER_SECONDS = 86_400.0
SHORT_HASH = 12  # characters of a manifest hash that ket prints


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerInfo:
    """What one worker process reports about itself.

    `tenants` None means every registered tenant; `queues` is the concurrency this host runs
    per queue it serves (`ket worker --queues` leaves the others out); `manifest_hash` the
    sha256 of the canonical manifest YAML (`ket manifest`); `interval_seconds` how often it
    reports.
    """

    id: str
    host: str
    pid: int
    started_at: datetime
    tenants: tuple[str, ...] | None
    queues: Mapping[str, int] = field(default_factory=dict)
    version: str
    manifest_hash: str
    interval_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class SeenWorker:
    """A roster row: the worker's report, when it was last seen, and how long ago that is."""

    info: WorkerInfo
    last_seen_at: datetime
    seen_seconds_ago: float

    @property
    def stale(self) -> bool:
        """Not seen for STALE_INTERVALS of its own intervals: gone, or cut off."""
        return self.seen_seconds_ago > STALE_INTERVALS * self.info.interval_seconds


class WorkerRoster(Protocol):
    """The `ket_workers` table of one control database (its schema installed on first report)."""

    async def worker_report(
        self, info: WorkerInfo, *, forget_after_seconds: float = FORGET_AFTER_SECONDS
    ) -> list[SeenWorker]:
        """Record `info` as seen now, delete rows not seen for `forget_after_seconds`, and
        return every row (this one included), oldest first, in one transaction."""
        ...

    async def worker_list(self) -> list[SeenWorker]:
        """Every row, oldest first; none when no worker ever reported here."""
        ...

    async def worker_remove(self, worker_id: str) -> bool:
        """Delete the row of `worker_id` (a clean shutdown); False if there was none."""
        ...

    async def close(self) -> None:
        """Release the roster's connections."""
        ...


def manifest_counts(workers: list[SeenWorker]) -> dict[str, int]:
    """Manifest hash -> how many live workers run it, most common first (then by hash)."""
    counts: dict[str, int] = {}
    for worker in workers:
        if not worker.stale:
            counts[worker.info.manifest_hash] = counts.get(worker.info.manifest_hash, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def unserved_queues(
    declared: Iterable[str], workers: Iterable[SeenWorker], *, tenant: str | None = None
) -> list[str]:
    """The `declared` queues, sorted, that no live worker serves (for `tenant` when given: no
    live worker that serves that tenant). A stopping worker, which has given its tenants up,
    serves none."""
    served: set[str] = set()
    for worker in workers:
        tenants = worker.info.tenants
        if worker.stale or tenants == ():
            continue
        if tenant is None or tenants is None or tenant in tenants:
            served.update(queue for queue, n in worker.info.queues.items() if n > 0)
    return sorted(set(declared) - served)
