"""Operator retry and cancel in the SQL store: one implementation for one job and for a batch.

A command first locks the rows it acts on (`FOR UPDATE` on PostgreSQL, where a worker's claim
skips locked rows and its settlement waits for them; on SQLite the write lock every transaction
takes at BEGIN IMMEDIATE serialises everything), then decides each row's fate from its state as
the memory store's transitions do, and changes the rows going one way in one statement. A single
`ket jobs cancel 12` is a batch of one.

The statements that change rows are fixed, named by their handles (statement.py, built in
query.py) and take the ids as an array on PostgreSQL; the statements that select by a filter
vary with it and run on the engine, as every operator command does.

PostgreSQL re-reads a locked row once the transaction that held it commits and drops it if it no
longer matches (a row a worker claimed meanwhile is then executing), so every row ends as if the
command and the worker had acted one after the other. The updates repeat the state test all the
same: a row can only leave a state it is in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import EngineRows, Rows, fetch_all, fetch_one
from ket.store.types import (
    RETRY_STATES,
    RUNNABLE_STATES,
    BulkApplied,
    BulkCount,
    JobFilter,
    JobId,
    JobState,
    StateChange,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


async def cancel_rows(rows: Rows, now: datetime | None, locked: Sequence[Any]) -> list[StateChange]:
    """Cancel locked rows: pending ones at once, executing ones by a request to their worker."""
    changes: list[StateChange] = []
    pending: list[JobId] = []
    running: list[JobId] = []
    for row in locked:
        state: JobState = row.state
        if state in RUNNABLE_STATES:
            pending.append(row.id)
            changes.append(StateChange(id=row.id, previous=state, state="cancelled", changed=True))
        elif state != "executing":
            changes.append(_unchanged(row, f"already {state}"))
        elif row.cancel_requested:
            changes.append(_unchanged(row, "cancel already requested"))
        else:
            running.append(row.id)
            changes.append(
                StateChange(
                    id=row.id,
                    previous=state,
                    state=state,
                    changed=True,
                    reason="cancel requested: its worker aborts it",
                )
            )
    if pending:
        await rows.rows(stmt.CANCEL_NOW, {"ids": pending, "now": now})
    if running:
        await rows.rows(stmt.REQUEST_CANCEL, {"ids": running})
    return changes


async def retry_rows(
    rows: Rows, now: datetime | None, locked: Sequence[Any]
) -> tuple[list[StateChange], set[str]]:
    """Make locked retryable or discarded rows available now, unless another active job holds
    their unique key; also the queues of the rows made available."""
    # a discarded job gave its key up; a retryable one still holds it
    keys = sorted({row.unique_key for row in locked if row.unique_key and row.state == "discarded"})
    holder: dict[tuple[str, str], JobId] = {}
    if keys:
        for active in await rows.rows(stmt.ACTIVE_HOLDERS, {"keys": keys}):
            holder[(active.name, active.unique_key)] = active.id
    changes: list[StateChange] = []
    retried: list[JobId] = []
    queues: set[str] = set()
    for row in locked:
        if row.state not in RETRY_STATES:
            reason = f"only retryable or discarded jobs can be retried, not {row.state}"
            changes.append(_unchanged(row, reason))
            continue
        key = (row.name, row.unique_key)
        # of two jobs of one key in a batch, the first takes the key
        if row.unique_key is not None and holder.setdefault(key, row.id) != row.id:
            reason = f"unique key {row.unique_key!r} is held by active job {holder[key]}"
            changes.append(_unchanged(row, reason))
            continue
        retried.append(row.id)
        queues.add(row.queue)
        changes.append(StateChange(id=row.id, previous=row.state, state="available", changed=True))
    if retried:
        await rows.rows(stmt.MAKE_AVAILABLE, {"ids": retried, "now": now})
    return changes, queues


async def count(
    conn: AsyncConnection, job_filter: JobFilter, states: tuple[JobState, ...], sample: int
) -> BulkCount:
    """How many jobs match, the first `sample` of them, and the highest matching id (on the
    engine: the filter's statements vary with it)."""
    from sqlalchemy import func, select

    from ket.store.sql import query
    from ket.store.sql.schema import jobs

    matching, params = _matching(conn.dialect.name, job_filter, states)
    total = await fetch_one(
        conn, select(func.count(), func.max(jobs.c.id)).where(*matching), params
    )
    rows = await fetch_all(
        conn, select(jobs).where(*matching).order_by(jobs.c.id).limit(sample), params
    )
    history = await fetch_all(conn, query.errors_of([row.id for row in rows])) if rows else []
    return BulkCount(
        count=total[0], sample=tuple(query.job_records(rows, history)), last_id=total[1]
    )


async def apply(
    conn: AsyncConnection,
    now: datetime | None,
    job_filter: JobFilter,
    states: tuple[JobState, ...],
    limit: int,
) -> tuple[BulkApplied, set[str]]:
    """Lock the first `limit` matching rows and retry or cancel them; also the queues to wake
    (on the engine, as `count`)."""
    from sqlalchemy import select

    from ket.store.sql.schema import jobs

    matching, params = _matching(conn.dialect.name, job_filter, states)
    statement = select(jobs).where(*matching).order_by(jobs.c.id).limit(limit).with_for_update()
    locked = await fetch_all(conn, statement, params)
    rows = EngineRows(conn)
    queues: set[str] = set()
    if job_filter.action == "retry":
        changes, queues = await retry_rows(rows, now, locked)
    else:
        changes = await cancel_rows(rows, now, locked)
    applied = BulkApplied(
        changed=tuple(c for c in changes if c.changed),
        skipped=tuple(c for c in changes if not c.changed),
        last_id=max((row.id for row in locked), default=None),
    )
    return applied, queues


def _matching(
    dialect: str, job_filter: JobFilter, states: tuple[JobState, ...]
) -> tuple[list[Any], dict[str, Any]]:
    """The filter as WHERE clauses, and their parameters (the states an array on PostgreSQL)."""
    from sqlalchemy import Text, false, or_

    from ket.store.sql.query import among, selected
    from ket.store.sql.schema import EXECUTING, jobs

    f = job_filter
    clauses: list[Any] = [among(dialect, jobs.c.state, "states", Text), jobs.c.id > f.after_id]
    if f.through_id is not None:
        clauses.append(jobs.c.id <= f.through_id)
    clauses.extend(selected(dialect, f.queues, f.names, f.tags))
    if f.ids:
        clauses.append(jobs.c.id.in_(sorted(set(f.ids))))
    if f.enqueued_before is not None:
        clauses.append(jobs.c.enqueued_at < f.enqueued_before)
    if f.action == "cancel":  # nothing is left to do to a job whose cancel was requested
        clauses.append(or_(~EXECUTING, jobs.c.cancel_requested == false()))
    return clauses, {"states": list(states)}


def _unchanged(row: Any, reason: str) -> StateChange:
    return StateChange(id=row.id, previous=row.state, state=row.state, changed=False, reason=reason)
