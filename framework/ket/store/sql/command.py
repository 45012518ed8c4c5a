"""Operator commands on one job (cancel, retry) and pruning, each inside one transaction."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.fetch import Rows, fetch_all, fetch_one
from ket.store.sql.now import time_params
from ket.store.sql.query import Statements
from ket.store.sql.schema import job_errors, jobs
from ket.store.types import JobId, JobState, Prune, StateChange

_PENDING = ("available", "scheduled", "retryable")


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
    state: JobState = row.state
    if state in _PENDING:
        await conn.execute(sql.cancel_now, {"p_id": job_id, "now": now})
        return StateChange(id=job_id, previous=state, state="cancelled", changed=True)
    if state != "executing":
        return unchanged(job_id, state, f"already {state}")
    if row.cancel_requested:
        return unchanged(job_id, state, "cancel already requested")
    await conn.execute(sql.request_cancel, {"p_id": job_id})
    return StateChange(
        id=job_id,
        previous=state,
        state=state,
        changed=True,
        reason="cancel requested: its worker aborts it",
    )


async def retry(
    conn: AsyncConnection, sql: Statements, now: datetime | None, job_id: JobId
) -> tuple[StateChange, str | None]:
    """Make retryable or discarded work available now; one more attempt if it used them all.

    Also returns the job's queue when the job became available (its waiters are to be woken).
    """
    row = await fetch_one(conn, sql.lock_job, {"p_id": job_id})
    if row is None:
        return unchanged(job_id, None, "no such job"), None
    if row.state not in ("retryable", "discarded"):
        return unchanged(
            job_id, row.state, f"only retryable or discarded jobs can be retried, not {row.state}"
        ), None
    if row.unique_key is not None and row.state == "discarded":
        key = {"p_name": row.name, "p_unique_key": row.unique_key}
        holder = await fetch_one(conn, sql.active_holder, key)
        if holder is not None:
            return unchanged(
                job_id,
                row.state,
                f"unique key {row.unique_key!r} is held by active job {holder.id}",
            ), None
    attempts = max(row.max_attempts, row.attempt + 1)
    await conn.execute(sql.make_available, {"p_id": job_id, "now": now, "p_max_attempts": attempts})
    change = StateChange(id=job_id, previous=row.state, state="available", changed=True)
    return change, row.queue


async def prune(conn: AsyncConnection, sql: Statements, now: datetime | None, params: Prune) -> int:
    """Delete one bounded batch of terminal jobs past retention (and their error history)."""
    values = time_params(now, retention=-params.older_than_seconds)
    values.update(states=list(params.states), limit=params.limit)
    ids = [row.id for row in await fetch_all(conn, sql.prunable, values)]
    if ids:
        await conn.execute(delete(job_errors).where(job_errors.c.job_id.in_(ids)))
        await conn.execute(delete(jobs).where(jobs.c.id.in_(ids)))
    return len(ids)
