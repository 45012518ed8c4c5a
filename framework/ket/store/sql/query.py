"""The SQL store's statements, and the rows they return turned into contract types."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, case, func, literal_column, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite

from ket.store.sql.column import from_micros
from ket.store.sql.now import Now
from ket.store.sql.schema import EXECUTING, RUNNABLE, TERMINAL, job_errors, jobs, schedules
from ket.store.types import (
    ClaimedJob,
    ErrorRecord,
    JobClaim,
    JobQuery,
    JobRecord,
    JobStats,
    Prune,
    Settle,
    TickClaim,
)

_CLAIMED = (
    jobs.c.id,
    jobs.c.name,
    jobs.c.queue,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.priority,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.unique_key,
    jobs.c.company,
    jobs.c.run_at,
    jobs.c.enqueued_at,
    jobs.c.lease_until,
    jobs.c.fence,
    jobs.c.tick,
    jobs.c.ticks_skipped,
)


def claim(now: Now, params: JobClaim) -> Any:
    """UPDATE the first due runnable rows (SKIP LOCKED on PostgreSQL) to executing."""
    claimable = (
        select(jobs.c.id)
        .where(jobs.c.queue == params.queue, RUNNABLE, jobs.c.run_at <= now.expr())
        .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
        .limit(params.limit)
        .with_for_update(skip_locked=True)
        .cte("claimable")
    )
    return (
        update(jobs)
        .where(jobs.c.id == claimable.c.id)
        .values(
            state="executing",
            attempt=jobs.c.attempt + 1,
            worker_id=params.worker_id,
            attempted_at=now.expr(),
            lease_until=now.plus(params.lease_seconds),
            fence=jobs.c.fence + 1,
            cancel_requested=False,
        )
        .returning(*_CLAIMED)
    )


def claimed_job(row: Any) -> ClaimedJob:
    return ClaimedJob(
        id=row.id,
        name=row.name,
        queue=row.queue,
        payload=row.payload,
        payload_version=row.payload_version,
        priority=row.priority,
        attempt=row.attempt,
        max_attempts=row.max_attempts,
        unique_key=row.unique_key,
        company=row.company,
        run_at=row.run_at,
        enqueued_at=row.enqueued_at,
        lease_until=row.lease_until,
        fence=row.fence,
        tick=row.tick,
        ticks_skipped=row.ticks_skipped,
    )


def complete_many(now: Now, settlements: Sequence[Settle]) -> Any:
    """Complete many jobs in one statement, each only with its current fence."""
    pairs = [(s.id, s.fence) for s in settlements]
    return (
        update(jobs)
        .where(tuple_(jobs.c.id, jobs.c.fence).in_(pairs), EXECUTING)
        .values(state="completed", finished_at=now.expr(), lease_until=None, cancel_requested=False)
        .returning(jobs.c.id)
    )


def settle_one(now: Now, settle: Settle) -> Any:
    """Apply one outcome if the fence is current; returns the attempt it settled."""
    values: dict[str, Any] = {"lease_until": None, "cancel_requested": False}
    if settle.outcome == "completed" or settle.outcome in ("discarded", "cancelled"):
        values.update(state=settle.outcome, finished_at=now.expr())
    elif settle.outcome == "retryable":
        values.update(state="retryable", run_at=now.plus(settle.delay_seconds))
    else:  # snoozed: the attempt is given back
        values.update(
            state="available" if settle.delay_seconds == 0 else "scheduled",
            run_at=now.plus(settle.delay_seconds),
            attempt=jobs.c.attempt - 1,
        )
    return (
        update(jobs)
        .where(jobs.c.id == settle.id, jobs.c.fence == settle.fence, EXECUTING)
        .values(values)
        .returning(jobs.c.id, jobs.c.attempt)
    )


def append_errors(now: Now) -> Any:
    """INSERT error history entries (executemany: job_id, attempt, error, traceback)."""
    return job_errors.insert().values(
        job_id=bindparam("job_id"),
        attempt=bindparam("attempt"),
        at=now.expr(),
        error=bindparam("error"),
        traceback=bindparam("traceback"),
    )


def rescue(now: Now, limit: int) -> Any:
    """Expired leases -> cancelled (cancel requested), discarded (last attempt) or retryable."""
    expired = (
        select(jobs.c.id)
        .where(EXECUTING, jobs.c.lease_until < now.expr())
        .order_by(jobs.c.lease_until, jobs.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .cte("expired")
    )
    final = jobs.c.cancel_requested | (jobs.c.attempt >= jobs.c.max_attempts)
    return (
        update(jobs)
        .where(jobs.c.id == expired.c.id)
        .values(
            state=case(
                (jobs.c.cancel_requested, "cancelled"),
                (jobs.c.attempt >= jobs.c.max_attempts, "discarded"),
                else_="retryable",
            ),
            run_at=case((final, jobs.c.run_at), else_=now.expr()),
            finished_at=case((final, now.expr()), else_=None),
            lease_until=None,
            cancel_requested=False,
        )
        .returning(
            jobs.c.id, jobs.c.name, jobs.c.queue, jobs.c.state, jobs.c.attempt, jobs.c.worker_id
        )
    )


def lock_job(job_id: int) -> Any:
    """The row an operator command changes, locked for the transaction on PostgreSQL."""
    return select(jobs).where(jobs.c.id == job_id).with_for_update()


def prunable(now: Now, prune: Prune) -> Any:
    states: list[Any] = [literal_column(f"'{s}'") for s in prune.states]
    return (
        select(jobs.c.id)
        .where(
            TERMINAL,
            jobs.c.state.in_(states),
            jobs.c.finished_at <= now.plus(-prune.older_than_seconds),
        )
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(prune.limit)
        .with_for_update(skip_locked=True)
    )


def schedule_install(dialect: str, now: Now, claim: TickClaim) -> Any:
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        dialect_insert(schedules)
        .values(
            schedule_id=claim.schedule_id,
            fingerprint=claim.fingerprint,
            last_tick=claim.tick,
            updated_at=now.expr(),
        )
        .on_conflict_do_nothing(index_elements=[schedules.c.schedule_id])
        .returning(schedules.c.schedule_id)
    )


def schedule_move(now: Now, claim: TickClaim) -> Any:
    """The compare-and-set: moves the row only if it still holds the expected state."""
    assert claim.expected is not None
    return (
        update(schedules)
        .where(
            schedules.c.schedule_id == claim.schedule_id,
            schedules.c.fingerprint == claim.expected.fingerprint,
            schedules.c.last_tick == claim.expected.last_tick,
        )
        .values(fingerprint=claim.fingerprint, last_tick=claim.tick, updated_at=now.expr())
    )


def listing(job_query: JobQuery) -> Any:
    statement = select(jobs)
    if job_query.state is not None:
        statement = statement.where(jobs.c.state == job_query.state)
    if job_query.queue is not None:
        statement = statement.where(jobs.c.queue == job_query.queue)
    if job_query.name is not None:
        statement = statement.where(jobs.c.name == job_query.name)
    return statement.order_by(jobs.c.id.desc()).limit(job_query.limit).offset(job_query.offset)


def errors_of(ids: Sequence[int]) -> Any:
    return (
        select(job_errors)
        .where(job_errors.c.job_id.in_(ids))
        .order_by(job_errors.c.job_id, job_errors.c.id)
    )


def job_records(rows: Sequence[Any], history: Sequence[Any]) -> list[JobRecord]:
    errors: dict[int, list[ErrorRecord]] = defaultdict(list)
    for entry in history:
        errors[entry.job_id].append(
            ErrorRecord(
                attempt=entry.attempt, at=entry.at, error=entry.error, traceback=entry.traceback
            )
        )
    return [
        JobRecord(
            id=row.id,
            name=row.name,
            queue=row.queue,
            state=row.state,
            payload=row.payload,
            payload_version=row.payload_version,
            priority=row.priority,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            unique_key=row.unique_key,
            company=row.company,
            run_at=row.run_at,
            enqueued_at=row.enqueued_at,
            attempted_at=row.attempted_at,
            finished_at=row.finished_at,
            worker_id=row.worker_id,
            lease_until=row.lease_until,
            fence=row.fence,
            cancel_requested=bool(row.cancel_requested),
            errors=tuple(errors.get(row.id, ())),
            tick=row.tick,
            ticks_skipped=row.ticks_skipped,
        )
        for row in rows
    ]


def counts() -> Any:
    return select(jobs.c.state, jobs.c.queue, func.count()).group_by(jobs.c.state, jobs.c.queue)


def oldest(now: Now) -> Any:
    """The store's now, the earliest claim among executing jobs, the earliest due run_at."""
    lease = select(func.min(jobs.c.attempted_at)).where(EXECUTING).scalar_subquery()
    due = (
        select(func.min(jobs.c.run_at))
        .where(RUNNABLE, jobs.c.run_at <= now.expr())
        .scalar_subquery()
    )
    return select(now.expr().label("now"), lease.label("lease"), due.label("due"))


def job_stats(count_rows: Sequence[Any], oldest_row: Any) -> JobStats:
    now: datetime = _instant(oldest_row.now)
    lease = _instant(oldest_row.lease) if oldest_row.lease is not None else None
    due = _instant(oldest_row.due) if oldest_row.due is not None else None
    return JobStats(
        counts={(row.state, row.queue): row[2] for row in count_rows},
        oldest_lease_age=(now - lease).total_seconds() if lease else None,
        oldest_available_age=(now - due).total_seconds() if due else None,
    )


def _instant(value: Any) -> datetime:
    """Scalar subqueries lose the column type, so SQLite hands back raw microseconds."""
    return from_micros(int(value)) if isinstance(value, int) else value
