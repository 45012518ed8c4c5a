"""Operator commands on one job (cancel, retry) and pruning, each inside one transaction."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.sql.now import time_params
from ket.store.types import JobId, JobState, Prune, StateChange

_PENDING = ("available", "scheduled", "retryable")


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
    state: JobState = row.state
    if state in _PENDING:
        await rows.rows(stmt.CANCEL_NOW, {"p_id": job_id, "now": now})
        return StateChange(id=job_id, previous=state, state="cancelled", changed=True)
    if state != "executing":
        return unchanged(job_id, state, f"already {state}")
    if row.cancel_requested:
        return unchanged(job_id, state, "cancel already requested")
    await rows.rows(stmt.REQUEST_CANCEL, {"p_id": job_id})
    return StateChange(
        id=job_id,
        previous=state,
        state=state,
        changed=True,
        reason="cancel requested: its worker aborts it",
    )


async def retry(rows: Rows, now: datetime | None, job_id: JobId) -> tuple[StateChange, str | None]:
    """Make retryable or discarded work available now; one more attempt if it used them all.

    Also returns the job's queue when the job became available (its waiters are to be woken).
    """
    row = await _locked(rows, job_id)
    if row is None:
        return unchanged(job_id, None, "no such job"), None
    if row.state not in ("retryable", "discarded"):
        return unchanged(
            job_id, row.state, f"only retryable or discarded jobs can be retried, not {row.state}"
        ), None
    if row.unique_key is not None and row.state == "discarded":
        key = {"p_name": row.name, "p_unique_key": row.unique_key}
        holders = await rows.rows(stmt.ACTIVE_HOLDER, key)
        if holders:
            return unchanged(
                job_id,
                row.state,
                f"unique key {row.unique_key!r} is held by active job {holders[0].id}",
            ), None
    attempts = max(row.max_attempts, row.attempt + 1)
    params = {"p_id": job_id, "now": now, "p_max_attempts": attempts}
    await rows.rows(stmt.MAKE_AVAILABLE, params)
    change = StateChange(id=job_id, previous=row.state, state="available", changed=True)
    return change, row.queue


async def prune(rows: Rows, now: datetime | None, params: Prune) -> int:
    """Delete one bounded batch of terminal jobs past retention (and their error history)."""
    values = time_params(now, retention=-params.older_than_seconds)
    values.update(states=list(params.states), limit=params.limit)
    ids = [row.id for row in await rows.rows(stmt.PRUNABLE, values)]
    if ids:
        await rows.rows(stmt.PRUNE_ERRORS, {"ids": ids})
        await rows.rows(stmt.PRUNE_JOBS, {"ids": ids})
    return len(ids)


async def _locked(rows: Rows, job_id: JobId) -> Any:
    """The job's row, locked for the rest of the transaction; None if there is none."""
    found = await rows.rows(stmt.LOCK_JOB, {"p_id": job_id})
    return found[0] if found else None
