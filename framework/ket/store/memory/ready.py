"""The runnable jobs of one queue, kept so a claim costs O(k log n), not a scan of the backlog."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from datetime import datetime

from ket.store.memory.row import JobRow
from ket.store.types import RUNNABLE_STATES, JobId


class ReadyQueue:
    """Two heaps: jobs not yet due by run_at, and due jobs by (priority, run_at, id).

    A claim first moves every job that has become due into the second heap, then pops from it.
    Entries are never removed in place: a row that leaves the runnable states (or re-enters with
    a new run_at) bumps its token, and entries with an old token are dropped when they surface.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[datetime, JobId, int]] = []
        self._due: list[tuple[int, datetime, JobId, int]] = []

    def push(self, row: JobRow) -> None:
        """Enter a row that just became runnable (its run_at already set)."""
        row.token += 1
        heapq.heappush(self._waiting, (row.run_at, row.id, row.token))

    def take(self, now: datetime, limit: int, rows: Mapping[JobId, JobRow]) -> list[JobRow]:
        """Remove and return up to `limit` due rows, in claim order."""
        self._promote(now, rows)
        taken: list[JobRow] = []
        early: list[JobRow] = []
        while self._due and len(taken) < limit:
            *_, job_id, token = heapq.heappop(self._due)
            row = _live(rows, job_id, token)
            if row is None:
                continue
            if row.run_at > now:
                # The clock was set back after this row became due: it waits again.
                early.append(row)
            else:
                taken.append(row)
        for row in early:
            heapq.heappush(self._waiting, (row.run_at, row.id, row.token))
        return taken

    def _promote(self, now: datetime, rows: Mapping[JobId, JobRow]) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            _, job_id, token = heapq.heappop(self._waiting)
            row = _live(rows, job_id, token)
            if row is not None:
                heapq.heappush(self._due, (row.priority, row.run_at, row.id, row.token))


def _live(rows: Mapping[JobId, JobRow], job_id: JobId, token: int) -> JobRow | None:
    row = rows.get(job_id)
    if row is None or row.token != token or row.state not in RUNNABLE_STATES:
        return None
    return row
