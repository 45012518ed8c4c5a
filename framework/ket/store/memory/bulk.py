"""Bulk retry and cancel in memory: the filter, row by row, through the single-job transitions.

Every function here runs under the database lock, with the store's now, after validation.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from ket.store.memory import transition
from ket.store.memory.database import MemoryDatabase
from ket.store.memory.row import JobRow
from ket.store.types import BulkApplied, BulkCount, JobFilter, JobState, StateChange


def count(
    database: MemoryDatabase, job_filter: JobFilter, states: tuple[JobState, ...], sample: int
) -> BulkCount:
    """How many rows match, the first `sample` of them, and the highest matching id."""
    matched = list(_matching(database, job_filter, states))
    return BulkCount(
        count=len(matched),
        sample=tuple(row.record() for row in matched[:sample]),
        last_id=matched[-1].id if matched else None,
    )


def apply(
    database: MemoryDatabase,
    job_filter: JobFilter,
    states: tuple[JobState, ...],
    limit: int,
    now: datetime,
) -> tuple[BulkApplied, set[str]]:
    """Retry or cancel the first `limit` matching rows; also the queues to wake."""
    move = transition.retry if job_filter.action == "retry" else transition.cancel
    changed: list[StateChange] = []
    skipped: list[StateChange] = []
    woken: set[str] = set()
    last_id = None
    for row in _matching(database, job_filter, states):
        if len(changed) + len(skipped) == limit:
            break
        change = move(database, row, now)
        (changed if change.changed else skipped).append(change)
        if change.changed and change.state == "available":
            woken.add(row.queue)
        last_id = row.id
    return BulkApplied(changed=tuple(changed), skipped=tuple(skipped), last_id=last_id), woken


def _matching(
    database: MemoryDatabase, job_filter: JobFilter, states: tuple[JobState, ...]
) -> Iterator[JobRow]:
    """The matching rows, lowest id first (rows are kept in the order they were inserted)."""
    f = job_filter
    for row in list(database.rows.values()):
        if (
            row.id > f.after_id
            and (f.through_id is None or row.id <= f.through_id)
            and row.selected(states, f.queues, f.names, f.tags)
            and (not f.ids or row.id in f.ids)
            and (f.enqueued_before is None or row.enqueued_at < f.enqueued_before)
            and not (f.action == "cancel" and row.state == "executing" and row.cancel_requested)
        ):
            yield row
