"""Inserting jobs, written once as a plan of statements that any connection can run.

The same plan runs on the store's async connections and on an application's own connection,
synchronous or not (enqueue inside the app's transaction: app_connection.py), so the unique-key,
window and debounce logic exists once.

A job under a uniqueness window or a debounce (`NewJob.window`) looks for the earlier job of its
key before it is written, so enqueues of one key are serialised: on PostgreSQL by an advisory
lock on the key held to the end of the transaction, taken before the look (each statement of a
READ COMMITTED transaction sees what committed before it); on SQLite by the write lock, which a
transaction that read a state since overwritten cannot take (WAL refuses its write), so two
enqueues never both find the key free.
Wake-ups need no statement here: on PostgreSQL a statement-level trigger sends one NOTIFY per
queue that got available work, and PostgreSQL delivers it only when the transaction commits.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any

from ket.errors import StoreError
from ket.store.clock import delays_ended
from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows, SyncRows
from ket.store.sql.now import TimeSql
from ket.store.sql.statement import Statement
from ket.store.types import DEBOUNCED_STATES, Inserted, NewJob
from ket.store.validate import encode_tags, encode_trace_context
from ket.wakeup.listener import CHANNEL as CHANNEL  # the channel an insert NOTIFYs

_UNIQUE_TRIES = 5
# From this many plain jobs, SQLite, whose transaction holds the write lock, numbers them itself;
# fewer are inserted one statement each. PostgreSQL gets any batch of plain jobs as one
# statement of arrays (`unnested`).
NUMBERED_FROM = 64
# The columns of a job that travel to `unnested`, each as an array or one value, with their types.
_ARRAYS: tuple[tuple[str, str], ...] = (
    ("name", "text"),
    ("queue", "text"),
    ("priority", "integer"),
    ("payload", "text"),
    ("payload_version", "integer"),
    ("max_attempts", "integer"),
    ("company", "text"),
    ("run_at", "instant"),
    ("tick", "instant"),
    ("ticks_skipped", "integer"),
    ("tags", "text"),
    ("trace_context", "text"),
    ("expires_s", "float"),
    ("concurrency_key", "text"),
    ("rate_key", "text"),
)


@dataclass(frozen=True, slots=True)
class Step:
    """One statement to run, with its parameters (a list: executemany); the plan reads the
    rows it returns by position."""

    statement: Statement
    parameters: dict[str, Any] | list[dict[str, Any]] | None = field(default=None)


Plan = Generator[Step, list[Any], list[Inserted]]


@dataclass(frozen=True)
class InsertSql:
    """The insert statements of one dialect, built once."""

    plain: Any
    ignoring_unique: Any
    holder: Any
    unnested: Any  # None on SQLite
    last_id: Any
    numbered: Any
    ticked: Any  # None on SQLite: a schedule's tick, its job and its fire as one statement
    window_lock: Any  # None on SQLite: the key of a window or debounce, locked to the commit
    window_holder: Any
    debounced: Any


@cache
def insert_sql(dialect: str) -> InsertSql:
    """The cached insert statements for `dialect` (SQLAlchemy Core: the lane runs their
    generated text, see statement.py)."""
    from sqlalchemy import (
        Float,
        Text,
        bindparam,
        case,
        cast,
        false,
        func,
        insert,
        literal_column,
        select,
        text,
    )
    from sqlalchemy.dialects import postgresql, sqlite

    from ket.store.sql.column import Instant
    from ket.store.sql.query import among
    from ket.store.sql.schema import ACTIVE, UNIQUE_ACTIVE, jobs, schedule_fires

    time = TimeSql(dialect)
    now = time.now()
    run_at = func.coalesce(bindparam("p_run_at", type_=Instant), now)
    # JSON encoded by the caller (validate.py), stored as it came
    payload: Any = bindparam("p_payload", type_=Text)
    tags: Any = bindparam("p_tags", type_=Text)
    trace: Any = bindparam("p_trace_context", type_=Text)
    if dialect == "postgresql":
        payload = cast(payload, postgresql.JSONB)
        tags = cast(tags, postgresql.JSONB)
        trace = cast(trace, postgresql.JSONB)
    values = {
        "name": bindparam("p_name"),
        "queue": bindparam("p_queue"),
        # constants as literals, so the lane passes only the job's own values
        "state": case(
            (run_at <= now, literal_column("'available'")), else_=literal_column("'scheduled'")
        ),
        "priority": bindparam("p_priority"),
        "payload": payload,
        "payload_version": bindparam("p_payload_version"),
        "attempt": literal_column("0"),
        "max_attempts": bindparam("p_max_attempts"),
        "unique_key": bindparam("p_unique_key"),
        "company": bindparam("p_company"),
        "run_at": run_at,
        "enqueued_at": now,
        "fence": literal_column("0"),
        "cancel_requested": false(),
        "tick": bindparam("p_tick", type_=Instant),
        "ticks_skipped": bindparam("p_ticks_skipped"),
        "tags": tags,
        "trace_context": trace,
        "expires_at": time.after(run_at, bindparam("p_expires_s", type_=Float)),
        "concurrency_key": bindparam("p_concurrency_key", type_=Text),
        "rate_key": bindparam("p_rate_key", type_=Text),
        "window_key": bindparam("p_window_key", type_=Text),
    }
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return InsertSql(
        plain=insert(jobs).values(values).returning(jobs.c.id, sort_by_parameter_order=True),
        ignoring_unique=dialect_insert(jobs)
        .values(values)
        .on_conflict_do_nothing(
            index_elements=[jobs.c.name, jobs.c.unique_key], index_where=UNIQUE_ACTIVE
        )
        .returning(jobs.c.id),
        last_id=select(literal_column("seq"))
        .select_from(text("sqlite_sequence"))
        .where(literal_column("name") == "ket_jobs"),
        numbered=insert(jobs).values({**values, "id": bindparam("p_id")}),
        unnested=_unnested(now) if dialect == "postgresql" else None,
        ticked=_ticked(now, values, jobs, schedule_fires) if dialect == "postgresql" else None,
        holder=select(jobs.c.id).where(
            jobs.c.name == bindparam("p_name"),
            jobs.c.unique_key == bindparam("p_unique_key"),
            ACTIVE,
        ),
        window_lock=_window_lock() if dialect == "postgresql" else None,
        window_holder=select(jobs.c.id)
        .where(
            jobs.c.name == bindparam("p_name"),
            jobs.c.window_key == bindparam("p_window_key"),
            jobs.c.enqueued_at > time.after(now, -bindparam("p_window_s", type_=Float)),
            among(dialect, jobs.c.state, "p_states", Text()),
        )
        .order_by(jobs.c.id.desc())
        .limit(1),
        debounced=_debounced(dialect, values, jobs),
    )


# The advisory locks of window keys: the two-number form, whose keys never meet the one-number
# form's (the migrations' and the limits' locks), with this first number.
_WINDOW_LOCK_CLASS = 0x6B65


def _window_lock() -> Any:
    """PostgreSQL: lock the key of a window or debounce (`p_name`, `p_window_key`) until the
    transaction ends: enqueues of one key take turns from the look to the commit."""
    from sqlalchemy import Text, bindparam, func, literal_column, select

    key = func.concat(
        bindparam("p_name", type_=Text),
        literal_column("'|'"),
        bindparam("p_window_key", type_=Text),
    )
    return select(
        func.pg_advisory_xact_lock(literal_column(str(_WINDOW_LOCK_CLASS)), func.hashtext(key))
    )


def _debounced(dialect: str, values: dict[str, Any], jobs: Any) -> Any:
    """The newest job of the key (`p_name`, `p_window_key`) not yet started takes the new job's
    input, options and run time, no later than `p_max_wait_s` after its own enqueue (when not
    NULL); returns its id, or no row when there is none."""
    from sqlalchemy import Float, and_, bindparam, case, cast, literal_column, or_, select, update

    time = TimeSql(dialect)
    now = time.now()
    pending = jobs.c.state.in_([literal_column(f"'{state}'") for state in DEBOUNCED_STATES])
    newest = (
        select(jobs.c.id)
        .where(
            jobs.c.name == bindparam("p_name"),
            jobs.c.window_key == bindparam("p_window_key"),
            pending,
            jobs.c.attempt == literal_column("0"),
        )
        .order_by(jobs.c.id.desc())
        .limit(1)
        .scalar_subquery()
    )
    wanted = values["run_at"]
    max_wait = cast(bindparam("p_max_wait_s", type_=Float), Float)  # typed for its IS NULL
    latest = time.after(jobs.c.enqueued_at, max_wait)
    run_at = case((or_(max_wait.is_(None), wanted <= latest), wanted), else_=latest)
    kept = ("payload", "payload_version", "priority", "max_attempts", "tags", "trace_context")
    return (
        update(jobs)
        .where(and_(jobs.c.id == newest, pending))
        .values(
            {
                **{name: values[name] for name in (*kept, "concurrency_key", "rate_key")},
                "run_at": run_at,
                "state": case(
                    (run_at <= now, literal_column("'available'")),
                    else_=literal_column("'scheduled'"),
                ),
                "expires_at": time.after(run_at, bindparam("p_expires_s", type_=Float)),
            }
        )
        .returning(jobs.c.id)
    )


def _unnested(now: Any) -> Any:
    """PostgreSQL: a batch of plain jobs in one statement; it returns one row, the new ids as an
    array in the batch's order.

    Each column travels either as an array of the batch's values (`a_<column>`) or, when every
    job of the batch holds the same value, as that one value (`s_<column>`) beside an empty
    array: `unnest` pads the shorter arrays with NULLs, and the row takes the scalar where its
    array had none. A batch mostly shares everything but its payloads, so most columns cost
    neither an array to encode nor one to unpack (`_arrays`). An array of `n` zeros keeps the
    row count when every column is constant.

    The ids are drawn in a materialised CTE next to each row's position, so that no ordering of
    the insert itself is relied on; one row of an array costs less to read than a row per job.
    """
    from sqlalchemy import (
        DateTime,
        Float,
        Integer,
        Text,
        bindparam,
        case,
        cast,
        false,
        func,
        insert,
        literal_column,
        select,
    )
    from sqlalchemy.dialects import postgresql

    from ket.store.sql.schema import jobs

    types: dict[str, Any] = {
        "text": Text(),
        "integer": Integer(),
        "instant": DateTime(timezone=True),
        "float": Float(),
    }
    arrays = [bindparam(f"a_{n}", type_=postgresql.ARRAY(types[t])) for n, t in _ARRAYS]
    rows = func.array_fill(literal_column("0"), postgresql.array([bindparam("n", type_=Integer())]))
    given = (
        func.unnest(*arrays, rows)
        .table_valued(*[name for name, _ in _ARRAYS], "row", with_ordinality="ord")
        .render_derived(name="given")
    )
    sequence = select(
        func.pg_get_serial_sequence(literal_column("'ket_jobs'"), literal_column("'id'"))
    ).scalar_subquery()  # looked up once, not per row
    columns = [
        func.coalesce(given.c[n], bindparam(f"s_{n}", type_=types[t])).label(n) for n, t in _ARRAYS
    ]
    numbered = (
        select(func.nextval(sequence).label("id"), *columns, given.c.ord)
        .select_from(given)
        .cte("numbered")
        .prefix_with("MATERIALIZED")
    )
    run_at = func.coalesce(numbered.c.run_at, now)
    values = {
        "id": numbered.c.id,
        "name": numbered.c.name,
        "queue": numbered.c.queue,
        "state": case(
            (run_at <= now, literal_column("'available'")), else_=literal_column("'scheduled'")
        ),
        "priority": numbered.c.priority,
        "payload": cast(numbered.c.payload, postgresql.JSONB),
        "payload_version": numbered.c.payload_version,
        "attempt": literal_column("0"),
        "max_attempts": numbered.c.max_attempts,
        "company": numbered.c.company,
        "run_at": run_at,
        "enqueued_at": now,
        "fence": literal_column("0"),
        "cancel_requested": false(),
        "tick": numbered.c.tick,
        "ticks_skipped": numbered.c.ticks_skipped,
        "tags": cast(numbered.c.tags, postgresql.JSONB),
        "trace_context": cast(numbered.c.trace_context, postgresql.JSONB),
        "expires_at": TimeSql("postgresql").after(run_at, numbered.c.expires_s),
        "concurrency_key": numbered.c.concurrency_key,
        "rate_key": numbered.c.rate_key,
    }
    inserted = insert(jobs).from_select(list(values), select(*values.values())).cte("inserted")
    ids = func.array_agg(postgresql.aggregate_order_by(numbered.c.id, numbered.c.ord))
    # a data-modifying CTE runs whether or not the outer query reads it
    return select(ids).add_cte(inserted)


def _ticked(now: Any, values: dict[str, Any], jobs: Any, fires: Any) -> Any:
    """PostgreSQL: a schedule's tick as one statement, so that it needs no transaction of its
    own (four round trips fewer a tick: BEGIN, the job, the fire, COMMIT). The row moves by
    compare-and-set (query.py's `schedule_move`); only from a row that moved is the job
    inserted, and only from the job its fire: all or nothing, as the one statement commits.
    Returns the job's id, or no row when another replica moved the row first."""
    from sqlalchemy import bindparam, insert, select

    from ket.store.sql.query import statements

    moved = statements("postgresql").schedule_move.cte("moved")
    job = (
        insert(jobs)
        .from_select(list(values), select(*values.values()).select_from(moved))
        .returning(jobs.c.id)
        .cte("job")
    )
    fire = insert(fires).from_select(
        ["schedule_id", "fingerprint", "tick", "skipped", "job_id", "fired_at"],
        select(
            bindparam("p_schedule_id"),
            bindparam("p_fingerprint"),
            bindparam("p_tick", type_=fires.c.tick.type),
            bindparam("p_skipped"),
            job.c.id,
            now,
        ).select_from(job),
    )
    # a data-modifying CTE runs whether or not the outer query reads it
    return select(job.c.id).add_cte(fire.cte("fire"))


def insert_plan(
    dialect: str,
    now: datetime | None,
    batch: Sequence[NewJob],
    payloads: Sequence[str],
    *,
    write_locked: bool = True,
) -> Plan:
    """Insert `batch` (payloads pre-encoded); unique keys coalesce with the active holder.

    `now` None means the database's time. `write_locked` says a SQLite transaction holds the
    write lock from its start (the store's own transactions do; an application's may not).
    """
    if any(job.delay_seconds for job in batch):
        if now is None:  # a delay counts from the database's now: read it, and insert at it
            [row] = yield Step(stmt.CLOCK, {"now": None})
            now = row[0]
        batch = delays_ended(batch, now)
    results: list[Inserted | None] = [None] * len(batch)
    plain = [i for i, job in enumerate(batch) if job.unique_key is None and job.window_key is None]
    # PostgreSQL: any batch as one statement; SQLite: large batches numbered by hand
    bulk = dialect == "postgresql" or (write_locked and len(plain) >= NUMBERED_FROM)
    if len(plain) > 1 and bulk:
        jobs_, texts = [batch[i] for i in plain], [payloads[i] for i in plain]
        if dialect == "postgresql":
            [row] = yield Step(stmt.INSERT_UNNESTED, _arrays(jobs_, texts, now))
            ids: list[int] = row[0]
        else:
            ids = yield from _numbered(jobs_, texts, now)
        for index, job_id in zip(plain, ids, strict=True):
            results[index] = Inserted(id=job_id, coalesced=False)
    elif plain:
        rows = yield Step(
            stmt.INSERT_PLAIN, [job_parameters(batch[i], payloads[i], now) for i in plain]
        )
        for index, row in zip(plain, rows, strict=True):
            results[index] = Inserted(id=row[0], coalesced=False)
    for index, job in enumerate(batch):
        if job.window_key is not None:
            results[index] = yield from _insert_windowed(dialect, job, payloads[index], now)
        elif job.unique_key is not None:
            results[index] = yield from _insert_unique(job, payloads[index], now)
    return [r for r in results if r is not None]


def ticks_in_one(dialect: str, job: NewJob) -> bool:
    """Whether a schedule's tick that fires `job` is one statement (`ticked`): on PostgreSQL,
    when the job has no unique or window key (one with a key may coalesce: statements of its
    own)."""
    return dialect == "postgresql" and job.unique_key is None and job.window_key is None


def one_statement(dialect: str, batch: Sequence[NewJob]) -> bool:
    """Whether `insert_plan` inserts `batch` with one statement (so it needs no transaction):
    one plain job, or on PostgreSQL any number of them; a unique or window key takes statements
    of its own."""
    if any(job.unique_key is not None or job.window_key is not None for job in batch):
        return False
    return len(batch) == 1 or dialect == "postgresql"


def _numbered(
    batch: Sequence[NewJob], payloads: Sequence[str], now: datetime | None
) -> Generator[Step, list[Any], list[int]]:
    """SQLite: number the rows ourselves and insert them without RETURNING.

    Every SQLite transaction holds the write lock from its BEGIN IMMEDIATE, so nobody else can
    take ids between reading the sequence and inserting; AUTOINCREMENT never reuses them.
    """
    rows = yield Step(stmt.INSERT_LAST_ID)
    first = (rows[0][0] if rows else 0) + 1
    ids = list(range(first, first + len(batch)))
    yield Step(
        stmt.INSERT_NUMBERED,
        [
            {**job_parameters(job, payload, now), "p_id": job_id}
            for job_id, job, payload in zip(ids, batch, payloads, strict=True)
        ],
    )
    return ids


def _insert_unique(
    job: NewJob, payload: str, now: datetime | None
) -> Generator[Step, list[Any], Inserted]:
    for _ in range(_UNIQUE_TRIES):
        rows = yield Step(stmt.INSERT_IGNORING_UNIQUE, job_parameters(job, payload, now))
        if rows:
            return Inserted(id=rows[0][0], coalesced=False)
        rows = yield Step(stmt.INSERT_HOLDER, {"p_name": job.name, "p_unique_key": job.unique_key})
        if rows:
            return Inserted(id=rows[0][0], coalesced=True)
        # the holder finished between the two statements: the key is free, try again
    raise StoreError(
        f"job {job.name!r}: unique key {job.unique_key!r} kept changing hands; try again"
    )


def _insert_windowed(
    dialect: str, job: NewJob, payload: str, now: datetime | None
) -> Generator[Step, list[Any], Inserted]:
    """Insert `job` unless an earlier job of its window key is its outcome (a window's holder,
    or a debounced job that took its input), with the key locked first on PostgreSQL."""
    window = job.window
    assert window is not None and job.window_key is not None
    key = {"p_name": job.name, "p_window_key": job.window_key}
    if dialect == "postgresql":
        yield Step(stmt.INSERT_WINDOW_LOCK, key)
    if window.debounce:
        rows = yield Step(
            stmt.INSERT_DEBOUNCED,
            {**job_parameters(job, payload, now), "p_max_wait_s": window.max_wait_seconds},
        )
    else:
        rows = yield Step(
            stmt.INSERT_WINDOW_HOLDER,
            {**key, "now": now, "p_window_s": window.seconds, "p_states": list(window.states)},
        )
    if rows:
        return Inserted(id=rows[0][0], coalesced=True)
    [row] = yield Step(stmt.INSERT_PLAIN, job_parameters(job, payload, now))
    return Inserted(id=row[0], coalesced=False)


def wake_queues(batch: Sequence[NewJob], now: datetime | None) -> set[str]:
    """Queues that got work runnable at once (a guess when now is the database's: hints only)."""
    if all(job.run_at is None and not job.delay_seconds for job in batch):  # without the clock
        return {job.queue for job in batch}
    moment = now or datetime.now(UTC)
    return {
        job.queue
        for job in batch
        if (job.run_at is None and not job.delay_seconds)
        or (job.run_at is not None and job.run_at <= moment)
    }


def _arrays(
    batch: Sequence[NewJob], payloads: Sequence[str], now: datetime | None
) -> dict[str, Any]:
    """The parameters of `unnested`: each column as one list in the batch's order, or as its one
    value when every job holds the same (equal, as the column stores it)."""
    columns: dict[str, list[Any]] = {
        "name": [job.name for job in batch],
        "queue": [job.queue for job in batch],
        "priority": [job.priority for job in batch],
        "payload": list(payloads),
        "payload_version": [job.payload_version for job in batch],
        "max_attempts": [job.max_attempts for job in batch],
        "company": [job.company for job in batch],
        "run_at": [job.run_at for job in batch],
        "tick": [job.tick for job in batch],
        "ticks_skipped": [job.ticks_skipped for job in batch],
        "tags": [encode_tags(job.tags) for job in batch],
        "trace_context": [encode_trace_context(job.trace_context) for job in batch],
        "expires_s": [job.expires_in_seconds for job in batch],
        "concurrency_key": [job.concurrency_key for job in batch],
        "rate_key": [job.rate_key for job in batch],
    }
    parameters: dict[str, Any] = {"now": now, "n": len(batch)}
    for name, values in columns.items():
        # list.count compares in C, by identity first: the shared declaration values are found
        # at once. Equal values are the same to the column (the validated types: text, integers
        # that are not booleans, aware datetimes of one instant).
        if values.count(values[0]) == len(values):
            parameters[f"a_{name}"], parameters[f"s_{name}"] = [], values[0]
        else:
            parameters[f"a_{name}"], parameters[f"s_{name}"] = values, None
    return parameters


def job_parameters(job: NewJob, payload: str, now: datetime | None) -> dict[str, Any]:
    return {
        "now": now,
        "p_name": job.name,
        "p_queue": job.queue,
        "p_priority": job.priority,
        "p_payload": payload,
        "p_payload_version": job.payload_version,
        "p_max_attempts": job.max_attempts,
        "p_unique_key": job.unique_key,
        "p_company": job.company,
        "p_run_at": job.run_at,
        "p_tick": job.tick,
        "p_ticks_skipped": job.ticks_skipped,
        "p_tags": encode_tags(job.tags),
        "p_trace_context": encode_trace_context(job.trace_context),
        "p_expires_s": job.expires_in_seconds,
        "p_concurrency_key": job.concurrency_key,
        "p_rate_key": job.rate_key,
        "p_window_key": job.window_key,
    }


def _shape(step: Step) -> tuple[bool, Any]:
    """Whether `step` runs once per parameter set (`many`), and its parameters: a list of them,
    or the one set (one row is a plain, prepared statement)."""
    params = step.parameters
    if isinstance(params, list):
        return (True, params) if len(params) > 1 else (False, params[0])
    return False, params


async def run_plan(rows: Rows, plan: Plan) -> list[Inserted]:
    """Run a plan on a connection (inside the caller's transaction)."""
    try:
        step = next(plan)
        while True:
            many, params = _shape(step)
            if many:
                step = plan.send(await rows.many(step.statement, params))
            else:
                step = plan.send(await rows.tuples(step.statement, params))
    except StopIteration as done:
        value: list[Inserted] = done.value
        return value


def run_sync(rows: SyncRows, plan: Plan) -> list[Inserted]:
    """Run a plan on a synchronous connection (inside the caller's transaction), as run_plan."""
    try:
        step = next(plan)
        while True:
            many, params = _shape(step)
            if many:
                step = plan.send(rows.many(step.statement, params))
            else:
                step = plan.send(rows.rows(step.statement, params))
    except StopIteration as done:
        value: list[Inserted] = done.value
        return value
