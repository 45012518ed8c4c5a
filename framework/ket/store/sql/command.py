"""Operator commands on one job (cancel, retry; the rows' rules are in bulk.py) and pruning,
each inside one transaction."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql import bulk
from ket.store.sql.fetch import Rows, fetch_all, fetch_one
from ket.store.sql.now import time_params
from ket.store.sql.query import Statements
from ket.store.sql.schema import job_errors, jobs
from ket.store.types import JobId, JobState, Prune, StateChange


async def wake(rows: Rows, sql: Statements, queues: Collection[str]) -> None:
    """NOTIFY each of `queues` once, delivered when the transaction commits (PostgreSQL only:
    SQLite's waiters are all in-process, and the store wakes those after the commit)."""
    if queues and sql.notify is not None:
        await rows.rows(sql.notify, {"queues": sorted(queues)})


def unchanged(job_id: JobId, state: JobState | None, reason: str) -> StateChange:
    """A command that changed nothing, and why."""
    return StateChange(id=job_id, previous=state, state=state, changed=False, reason=reason)


async def cancel(
    conn: AsyncConnection, sql: Statements, now: datetime | None, job_id: JobId
) -> StateChange:
    """Cancel pending work now; executing work gets a cancel request its worker acts on."""
    row = await fetch_one(conn, sql.lock_job, {"p_id": job_id})
    if row is None:
        return unchanged(job_id, None, "no such job")
    [change] = await bulk.cancel_rows(conn, now, [row])
    return change


async def retry(
    conn: AsyncConnection, sql: Statements, now: datetime | None, job_id: JobId
) -> tuple[StateChange, str | None]:
    """Make retryable or discarded work available now; one more attempt if it used them all.

    Also returns the job's queue when the job became available (its waiters are to be woken).
    """
    row = await fetch_one(conn, sql.lock_job, {"p_id": job_id})
    if row is None:
        return unchanged(job_id, None, "no such job"), None
    [change], queues = await bulk.retry_rows(conn, now, [row])
    return change, row.queue if queues else None


async def prune(conn: AsyncConnection, sql: Statements, now: datetime | None, params: Prune) -> int:
    """Delete one bounded batch of terminal jobs past retention (and their error history)."""
    values = time_params(now, retention=-params.older_than_seconds)
    values.update(states=list(params.states), limit=params.limit)
    ids = [row.id for row in await fetch_all(conn, sql.prunable, values)]
    if ids:
        await conn.execute(delete(job_errors).where(job_errors.c.job_id.in_(ids)))
        await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
    return len(ids)
