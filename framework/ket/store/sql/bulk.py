"""Operator retry and cancel in the SQL store: one implementation for one job and for a batch.

A command first locks the rows it acts on (`FOR UPDATE` on PostgreSQL, where a worker's claim
skips locked rows and its settlement waits for them; on SQLite the write lock every transaction
takes at BEGIN IMMEDIATE serialises everything), then decides each row's fate from its state as
the memory store's transitions do, and changes the rows going one way in one statement. A single
`ket jobs cancel 12` is a batch of one.

PostgreSQL re-reads a locked row once the transaction that held it commits and drops it if it no
longer matches (a row a worker claimed meanwhile is then executing), so every row ends as if the
command and the worker had acted one after the other. The updates repeat the state test all the
same: a row can only leave a state it is in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, case, false, func, literal_column, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql import query
from ket.store.sql.fetch import fetch_all, fetch_one
from ket.store.sql.now import TimeSql
from ket.store.sql.schema import ACTIVE, EXECUTING, RUNNABLE, jobs
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

_RETRYABLE = jobs.c.state.in_([literal_column(f"'{s}'") for s in RETRY_STATES])


@dataclass(frozen=True)
class Statements:
    """The fixed statements of the operator commands in one dialect; `ids` is expanding."""

    cancel_now: Any
    request_cancel: Any
    make_available: Any
    holders: Any


@cache
def statements(dialect: str) -> Statements:
    """The cached statements of `dialect`."""
    now = TimeSql(dialect).now()
    ids = jobs.c.id.in_(bindparam("ids", expanding=True))
    return Statements(
        cancel_now=update(jobs).where(ids, RUNNABLE).values(state="cancelled", finished_at=now),
        request_cancel=update(jobs).where(ids, EXECUTING).values(cancel_requested=True),
        make_available=update(jobs)
        .where(ids, _RETRYABLE)
        .values(
            state="available",
            run_at=now,
            finished_at=None,
            # a job that used all its attempts gets one more
            max_attempts=case(
                (jobs.c.attempt >= jobs.c.max_attempts, jobs.c.attempt + 1),
                else_=jobs.c.max_attempts,
            ),
            cancel_requested=False,
        ),
        holders=select(jobs.c.id, jobs.c.name, jobs.c.unique_key).where(
            jobs.c.unique_key.in_(bindparam("keys", expanding=True)), ACTIVE
        ),
    )


async def cancel_rows(
    conn: AsyncConnection, now: datetime | None, rows: Sequence[Any]
) -> list[StateChange]:
    """Cancel locked rows: pending ones at once, executing ones by a request to their worker."""
    changes: list[StateChange] = []
    pending: list[JobId] = []
    running: list[JobId] = []
    for row in rows:
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
    sql = statements(conn.dialect.name)
    if pending:
        await conn.execute(sql.cancel_now, {"ids": pending, "now": now})
    if running:
        await conn.execute(sql.request_cancel, {"ids": running})
    return changes


async def retry_rows(
    conn: AsyncConnection, now: datetime | None, rows: Sequence[Any]
) -> tuple[list[StateChange], set[str]]:
    """Make locked retryable or discarded rows available now, unless another active job holds
    their unique key; also the queues of the rows made available."""
    sql = statements(conn.dialect.name)
    # a discarded job gave its key up; a retryable one still holds it
    keys = sorted({row.unique_key for row in rows if row.unique_key and row.state == "discarded"})
    holder: dict[tuple[str, str], JobId] = {}
    if keys:
        for active in await fetch_all(conn, sql.holders, {"keys": keys}):
            holder[(active.name, active.unique_key)] = active.id
    changes: list[StateChange] = []
    retried: list[JobId] = []
    queues: set[str] = set()
    for row in rows:
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
        await conn.execute(sql.make_available, {"ids": retried, "now": now})
    return changes, queues


async def count(
    conn: AsyncConnection, job_filter: JobFilter, states: tuple[JobState, ...], sample: int
) -> BulkCount:
    """How many jobs match, the first `sample` of them, and the highest matching id."""
    matching = _matching(job_filter, states)
    total = await fetch_one(conn, select(func.count(), func.max(jobs.c.id)).where(*matching))
    rows = await fetch_all(conn, select(jobs).where(*matching).order_by(jobs.c.id).limit(sample))
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
    """Lock the first `limit` matching rows and retry or cancel them; also the queues to wake."""
    locked = (
        select(jobs)
        .where(*_matching(job_filter, states))
        .order_by(jobs.c.id)
        .limit(limit)
        .with_for_update()
    )
    rows = await fetch_all(conn, locked)
    queues: set[str] = set()
    if job_filter.action == "retry":
        changes, queues = await retry_rows(conn, now, rows)
    else:
        changes = await cancel_rows(conn, now, rows)
    applied = BulkApplied(
        changed=tuple(c for c in changes if c.changed),
        skipped=tuple(c for c in changes if not c.changed),
        last_id=max((row.id for row in rows), default=None),
    )
    return applied, queues


def _matching(job_filter: JobFilter, states: tuple[JobState, ...]) -> list[Any]:
    """The filter as WHERE clauses."""
    f = job_filter
    clauses: list[Any] = [jobs.c.state.in_(states), jobs.c.id > f.after_id]
    if f.through_id is not None:
        clauses.append(jobs.c.id <= f.through_id)
    if f.queue is not None:
        clauses.append(jobs.c.queue == f.queue)
    if f.name is not None:
        clauses.append(jobs.c.name == f.name)
    if f.enqueued_before is not None:
        clauses.append(jobs.c.enqueued_at < f.enqueued_before)
    if f.action == "cancel":  # nothing is left to do to a job whose cancel was requested
        clauses.append(or_(~EXECUTING, jobs.c.cancel_requested == false()))
    return clauses


def _unchanged(row: Any, reason: str) -> StateChange:
    return StateChange(id=row.id, previous=row.state, state=row.state, changed=False, reason=reason)
