"""How each command moves one job between states (the rules of docs/stores.md, row by row).

Every function here runs under the database lock, with the store's now, after validation.
"""

from __future__ import annotations

from datetime import datetime

from ket.store.memory.database import MemoryDatabase
from ket.store.memory.row import JobRow
from ket.store.types import EXPIRED, RUNNABLE_STATES, JobState, Rescued, Settle, StateChange


def claim(
    database: MemoryDatabase, row: JobRow, worker_id: str, now: datetime, lease_until: datetime
) -> None:
    """A due runnable job starts an attempt under a lease and a new fence."""
    row.attempt += 1
    row.fence += 1
    row.worker_id = worker_id
    row.attempted_at = now
    row.lease_until = lease_until
    database.move(row, "executing")


def expire(database: MemoryDatabase, row: JobRow, now: datetime) -> None:
    """A runnable job past its expiry is discarded unstarted, and says why."""
    row.record_error(EXPIRED, None, now, ran=False)
    row.finished_at = now
    database.move(row, "discarded")


def settle(
    database: MemoryDatabase, row: JobRow, outcome: Settle, now: datetime, run_at: datetime
) -> None:
    """Apply an attempt's outcome to an executing job whose fence the caller checked."""
    row.lease_until = None
    if outcome.error is not None and outcome.outcome != "completed":  # a snooze's note too
        row.record_error(outcome.error.error, outcome.error.traceback, now)
    if outcome.outcome == "snoozed":
        row.attempt -= 1  # a snooze gives the attempt back
        row.run_at = run_at
        database.move(row, "scheduled" if outcome.delay_seconds > 0 else "available")
    elif outcome.outcome == "retryable":
        row.run_at = run_at
        database.move(row, "retryable")
    else:
        row.finished_at = now
        row.result = outcome.result
        database.move(row, outcome.outcome)


def rescue(database: MemoryDatabase, row: JobRow, now: datetime) -> Rescued:
    """An executing job whose lease expired: cancelled, discarded or retryable now."""
    row.record_error(f"lease expired: worker {row.worker_id} stopped heartbeating", None, now)
    row.lease_until = None
    if row.cancel_requested:
        row.finished_at = now
        database.move(row, "cancelled")
    elif row.attempt >= row.max_attempts:
        row.finished_at = now
        database.move(row, "discarded")
    else:
        row.run_at = now
        database.move(row, "retryable")
    return Rescued(
        id=row.id,
        name=row.name,
        queue=row.queue,
        state=row.state,
        attempt=row.attempt,
        worker_id=row.worker_id,
    )


def cancel(database: MemoryDatabase, row: JobRow, now: datetime) -> StateChange:
    """Runnable work is cancelled at once; executing work gets a cancel request."""
    previous = row.state
    if previous in RUNNABLE_STATES:
        row.finished_at = now
        database.move(row, "cancelled")
        return _changed(row, previous)
    if previous != "executing":
        return _unchanged(row, f"already {previous}")
    if row.cancel_requested:
        return _unchanged(row, "cancel already requested")
    row.cancel_requested = True
    return _changed(row, previous, "cancel requested: its worker aborts it")


def retry(database: MemoryDatabase, row: JobRow, now: datetime) -> StateChange:
    """Retryable or discarded work becomes available now, unless its unique key is taken."""
    previous = row.state
    if previous not in ("retryable", "discarded"):
        return _unchanged(
            row, f"only retryable or discarded jobs can be retried, this one is {previous}"
        )
    holder = None if row.key is None else database.holder(row.key)
    if holder not in (None, row.id):
        return _unchanged(row, f"unique key {row.unique_key!r} is held by active job {holder}")
    row.run_at = now
    row.finished_at = None
    row.expires_at = None  # the operator asked for it: it runs whatever its expiry
    row.cancel_requested = False
    row.max_attempts = max(row.max_attempts, row.attempt + 1)
    database.move(row, "available")
    return _changed(row, previous)


def unknown(job_id: int) -> StateChange:
    """The answer to a command naming a job that does not exist."""
    return StateChange(id=job_id, previous=None, state=None, changed=False, reason="no such job")


def _unchanged(row: JobRow, reason: str) -> StateChange:
    return StateChange(id=row.id, previous=row.state, state=row.state, changed=False, reason=reason)


def _changed(row: JobRow, previous: JobState, reason: str = "") -> StateChange:
    return StateChange(id=row.id, previous=previous, state=row.state, changed=True, reason=reason)
