"""Operator commands on one job (cancel, retry; the rows' rules are in bulk.py) and pruning,
each inside one transaction."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from ket.store.sql import bulk
from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.sql.now import time_params
from ket.store.types import JobId, JobState, Prune, StateChange


async def wake(rows: Rows, queues: Collection[str]) -> None:
    """NOTIFY each of `queues` once, delivered when the transaction commits (PostgreSQL only:
    SQLite's waiters are all in-process, and the store wakes those after the commit)."""
    if queues and stmt.wakes_by_notify(rows.dialect):
        await rows.rows(stmt.NOTIFY, {"queues": sorted(queues)})


def unchanged(job_id: JobId, state: JobState | None, reason: str) -> StateChange:
    """A command that changed nothing, and why."""
    return StateChange(id=job_id, previous=state, state=state, changed=False, reason=reason)


async def cancel(rows: Rows, now: datetime | None, job_id: JobId) -> StateChange:
    """Cancel pending work now; executing work gets a cancel request its worker acts on."""
    row = await _locked(rows, job_id)
    if row is None:
        return unchanged(job_id, None, "no such job")
    [change] = await bulk.cancel_rows(rows, now, [row])
    return change


async def retry(rows: Rows, now: datetime | None, job_id: JobId) -> tuple[StateChange, str | None]:
    """Make retryable or discarded work available now; one more attempt if it used them all.

    Also returns the job's queue when the job became available (its waiters are to be woken).
    """
    row = await _locked(rows, job_id)
    if row is None:
        return unchanged(job_id, None, "no such job"), None
    [change], queues = await bulk.retry_rows(rows, now, [row])
    return change, row.queue if queues else None


async def prune(rows: Rows, now: datetime | None, params: Prune) -> int:
    """Delete one bounded batch of terminal jobs past retention (and their error history)."""
    values = time_params(now, retention=-params.older_than_seconds)
    values.update(states=list(params.states), limit=params.limit)
    ids = [row.id for row in await rows.rows(stmt.PRUNABLE, values)]
    if ids:
        await rows.rows(stmt.PRUNE_ERRORS, {"ids": ids})
        await rows.rows(stmt.PRUNE_RESULTS, {"ids": ids})
        await rows.rows(stmt.PRUNE_STEPS, {"ids": ids})
        await rows.rows(stmt.PRUNE_JOBS, {"ids": ids})
    return len(ids)


async def _locked(rows: Rows, job_id: JobId) -> Any:
    """The job's row, locked for the rest of the transaction; None if there is none."""
    found = await rows.rows(stmt.LOCK_JOB, {"p_id": job_id})
    return found[0] if found else None
