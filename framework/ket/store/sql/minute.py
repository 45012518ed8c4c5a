"""The per-minute counts behind the dashboard's charts (MinuteStore): jobs enqueued, completed,
failed, discarded and cancelled per minute and queue, and each queue's backlog sampled.

A count reads the jobs table once a minute, never the hot path. It is one transaction that
first locks the one cursor row (`ket_minute_cursor`), so that however many workers serve the
tenant, one counts per interval and the others find it done. The cursor holds two marks: what
the last count counted up to (`counted_*`), and what was committed when it ran (`seen_*`). A
count counts the span between the two, then moves them on: the jobs with ids in
(counted_job_id, seen_job_id], the failed attempts with ids in (counted_error_id,
seen_error_id], and the jobs that finished from counted_at to seen_at. Counting one count late
means an insert whose transaction committed after a later id's (PostgreSQL numbers rows as they
are inserted, not as they commit) is counted all the same, unless its transaction stayed open
for longer than a whole interval.

Each row is added to its minute: enqueued by `enqueued_at`, finished by `finished_at`, a failed
attempt by when it failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.sql.stats import instant
from ket.store.types import EXPIRED, MINUTES_KEPT, TERMINAL_STATES, JobMinute, JobMinutes

_COUNTED = ("enqueued", "completed", "failed", "discarded", "cancelled")


@dataclass(frozen=True)
class MinuteStatements:
    """The statements of a count, and the listing the dashboard reads."""

    cursor: Any  # the cursor row, locked until the count commits
    start: Any  # the cursor's first row: parameters p_job, p_error, now
    marks: Any  # the newest job id and error id
    enqueued: Any  # per queue and minute, jobs with ids in (p_from, p_to]
    finished: Any  # per queue, minute and state, jobs finished in [p_since, p_until)
    failed: Any  # per queue and minute, retried attempts with error ids in (p_from, p_to]
    backlog: Any  # per queue, the due jobs waiting at `now` and the oldest run_at among them
    add: Any  # one minute of one queue added to its row (executemany)
    advance: Any  # the cursor moved on
    prune: Any  # minutes before p_before dropped
    listing: Any  # the minutes in [p_since, p_until)
    counted: Any  # the cursor's counted_at, unlocked


@cache
def statements(dialect: str) -> MinuteStatements:
    """The statements in `dialect` (imports SQLAlchemy)."""
    from sqlalchemy import (
        BigInteger,
        and_,
        bindparam,
        func,
        literal_column,
        or_,
        select,
        type_coerce,
        update,
    )
    from sqlalchemy.dialects import postgresql, sqlite

    from ket.store.sql.column import Instant
    from ket.store.sql.now import TimeSql
    from ket.store.sql.schema import RUNNABLE, job_errors, job_minutes, jobs, minute_cursor

    now = TimeSql(dialect).now()

    def minute(column: Any) -> Any:
        if dialect == "postgresql":
            return type_coerce(func.date_trunc(literal_column("'minute'"), column), Instant)
        micros = type_coerce(column, BigInteger)  # SQLite's instants: integer microseconds
        return type_coerce(micros - micros % 60_000_000, Instant)

    def ids(column: Any) -> Any:
        return and_(column > bindparam("p_from"), column <= bindparam("p_to"))

    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    start = dialect_insert(minute_cursor).values(
        one=1,
        counted_job_id=bindparam("p_job"),
        counted_error_id=bindparam("p_error"),
        counted_at=now,
        seen_job_id=bindparam("p_job"),
        seen_error_id=bindparam("p_error"),
        seen_at=now,
    )
    added = dialect_insert(job_minutes).values(
        minute=bindparam("p_minute", type_=Instant),
        queue=bindparam("p_queue"),
        **{name: bindparam(f"p_{name}") for name in _COUNTED},
        available=bindparam("p_available"),
        oldest_available_ms=bindparam("p_oldest_ms"),
    )
    sums = {name: job_minutes.c[name] + added.excluded[name] for name in _COUNTED}
    sampled = {
        name: func.coalesce(added.excluded[name], job_minutes.c[name])
        for name in ("available", "oldest_available_ms")
    }
    enqueued_minute = minute(jobs.c.enqueued_at)
    finished_minute = minute(jobs.c.finished_at)
    failed_minute = minute(job_errors.c.at)
    terminal = jobs.c.state.in_([literal_column(f"'{s}'") for s in TERMINAL_STATES])
    return MinuteStatements(
        cursor=select(minute_cursor).with_for_update(),
        start=start.on_conflict_do_nothing(),
        marks=select(
            select(func.coalesce(func.max(jobs.c.id), 0)).scalar_subquery().label("job"),
            select(func.coalesce(func.max(job_errors.c.id), 0)).scalar_subquery().label("error"),
            now.label("now"),
        ),
        enqueued=select(jobs.c.queue, enqueued_minute.label("minute"), func.count())
        .where(ids(jobs.c.id))
        .group_by(jobs.c.queue, enqueued_minute),
        finished=select(jobs.c.queue, finished_minute.label("minute"), jobs.c.state, func.count())
        .where(
            terminal,
            jobs.c.finished_at >= bindparam("p_since", type_=Instant),
            jobs.c.finished_at < bindparam("p_until", type_=Instant),
        )
        .group_by(jobs.c.queue, finished_minute, jobs.c.state),
        # an attempt that failed and was tried again: its job went on to a later attempt, or
        # is not finished (a job's last error, with which it gave up, counts as discarded)
        failed=select(jobs.c.queue, failed_minute.label("minute"), func.count())
        .select_from(job_errors.join(jobs, jobs.c.id == job_errors.c.job_id))
        .where(
            ids(job_errors.c.id),
            job_errors.c.error != EXPIRED,
            or_(job_errors.c.attempt < jobs.c.attempt, ~terminal),
        )
        .group_by(jobs.c.queue, failed_minute),
        backlog=select(jobs.c.queue, func.count(), func.min(jobs.c.run_at).label("oldest"))
        .where(RUNNABLE, jobs.c.run_at <= now)
        .group_by(jobs.c.queue),
        add=added.on_conflict_do_update(
            index_elements=[job_minutes.c.minute, job_minutes.c.queue], set_={**sums, **sampled}
        ),
        advance=update(minute_cursor)
        .where(minute_cursor.c.one == 1)
        .values(
            counted_job_id=minute_cursor.c.seen_job_id,
            counted_error_id=minute_cursor.c.seen_error_id,
            counted_at=minute_cursor.c.seen_at,
            seen_job_id=bindparam("p_job"),
            seen_error_id=bindparam("p_error"),
            seen_at=now,
        ),
        prune=job_minutes.delete().where(
            job_minutes.c.minute < bindparam("p_before", type_=Instant)
        ),
        listing=select(job_minutes)
        .where(
            job_minutes.c.minute >= bindparam("p_since", type_=Instant),
            job_minutes.c.minute < bindparam("p_until", type_=Instant),
        )
        .order_by(job_minutes.c.minute, job_minutes.c.queue),
        counted=select(minute_cursor.c.counted_at, minute_cursor.c.seen_at),
    )


async def record(rows: Rows, now: datetime | None, every: float) -> bool:
    """Count since the last count if that was `every` seconds ago or more (see the module's
    docstring), and sample the backlog; True when this call counted. `now`: the store's time
    (None: the database's)."""
    [marks] = await rows.tuples(stmt.MINUTE_MARKS, {"now": now})
    job, error, at = marks[0], marks[1], instant(marks[2])
    cursor = await rows.rows(stmt.MINUTE_CURSOR)
    counts = _Counts()
    if cursor:
        [mark] = cursor
        if (at - instant(mark.seen_at)).total_seconds() < every:
            return False  # another process counted lately
        await _count(rows, mark, counts)
        await rows.rows(stmt.MINUTE_ADVANCE, {"p_job": job, "p_error": error, "now": at})
    else:  # the first count: counting starts from its marks
        await rows.rows(stmt.MINUTE_START, {"p_job": job, "p_error": error, "now": at})
    sampled_at = at.replace(second=0, microsecond=0)
    for queue, n, oldest in await rows.tuples(stmt.MINUTE_BACKLOG, {"now": at}):
        waited = max(0, int((at - instant(oldest)).total_seconds() * 1000))
        counts.row(sampled_at, queue).update(p_available=n, p_oldest_ms=waited)
    if counts.rows:
        await rows.many(stmt.MINUTE_ADD, list(counts.rows.values()))
    await rows.rows(stmt.MINUTE_PRUNE, {"p_before": at - MINUTES_KEPT})
    return True


async def _count(rows: Rows, mark: Any, counts: _Counts) -> None:
    """Add the span between the cursor's marks to `counts`."""
    jobs_span = {"p_from": mark.counted_job_id, "p_to": mark.seen_job_id}
    for queue, minute, n in await rows.tuples(stmt.MINUTE_ENQUEUED, jobs_span):
        counts.row(minute, queue)["p_enqueued"] += n
    errors_span = {"p_from": mark.counted_error_id, "p_to": mark.seen_error_id}
    for queue, minute, n in await rows.tuples(stmt.MINUTE_FAILED, errors_span):
        counts.row(minute, queue)["p_failed"] += n
    finished_span = {"p_since": instant(mark.counted_at), "p_until": instant(mark.seen_at)}
    for queue, minute, state, n in await rows.tuples(stmt.MINUTE_FINISHED, finished_span):
        counts.row(minute, queue)[f"p_{state}"] += n


class _Counts:
    """The parameters of MINUTE_ADD, one set per minute and queue."""

    def __init__(self) -> None:
        self.rows: dict[tuple[datetime, str], dict[str, Any]] = {}

    def row(self, minute: Any, queue: str) -> dict[str, Any]:
        key = (instant(minute), queue)
        if key not in self.rows:
            self.rows[key] = {f"p_{name}": 0 for name in _COUNTED} | {
                "p_minute": key[0],
                "p_queue": queue,
                "p_available": None,
                "p_oldest_ms": None,
            }
        return self.rows[key]


async def listing(rows: Rows, since: datetime, until: datetime) -> JobMinutes:
    """The minutes in [since, until), in minute order, then queue order, and how far the counts
    have come."""
    found = await rows.rows(stmt.MINUTE_LISTING, {"p_since": since, "p_until": until})
    cursor = await rows.rows(stmt.MINUTE_COUNTED)
    # before the second count, nothing is counted (the first only sets the marks)
    counted = None
    if cursor and cursor[0].counted_at != cursor[0].seen_at:
        counted = instant(cursor[0].counted_at)
    minutes = [
        JobMinute(
            minute=instant(r.minute),
            queue=r.queue,
            enqueued=r.enqueued,
            completed=r.completed,
            failed=r.failed,
            discarded=r.discarded,
            cancelled=r.cancelled,
            available=r.available,
            oldest_available_ms=r.oldest_available_ms,
        )
        for r in found
    ]
    return JobMinutes(minutes=tuple(minutes), counted_until=counted)
