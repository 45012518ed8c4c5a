"""Inserting jobs, written once as a plan of statements that any connection can run.

The same plan runs on the store's async connections and on an application's own synchronous
SQLAlchemy connection (enqueue inside the app's transaction), so the unique-key logic exists once.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Executable,
    Row,
    Text,
    bindparam,
    case,
    cast,
    func,
    insert,
    select,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.errors import StoreError
from ket.store.sql.column import Instant
from ket.store.sql.now import Now
from ket.store.sql.schema import ACTIVE, UNIQUE_ACTIVE, jobs
from ket.store.types import Inserted, NewJob

CHANNEL = "ket_jobs"
_UNIQUE_TRIES = 5


@dataclass(frozen=True, slots=True)
class Step:
    """One statement to run, with executemany parameters if any."""

    statement: Executable
    parameters: dict[str, Any] | list[dict[str, Any]] | None = field(default=None)


Plan = Generator[Step, list[Row[Any]], list[Inserted]]


def insert_plan(dialect: str, now: Now, batch: Sequence[NewJob], payloads: Sequence[str]) -> Plan:
    """Insert `batch` (payloads pre-encoded); unique keys coalesce with the active holder."""
    results: list[Inserted | None] = [None] * len(batch)
    statement = _insert_statement(dialect, now)
    plain = [i for i, job in enumerate(batch) if job.unique_key is None]
    if plain:
        rows = yield Step(
            statement.returning(jobs.c.id, sort_by_parameter_order=True),
            [_parameters(batch[i], payloads[i]) for i in plain],
        )
        for index, row in zip(plain, rows, strict=True):
            results[index] = Inserted(id=row.id, coalesced=False)
    ignoring = _insert_statement(dialect, now, ignore_unique=True)
    for index, job in enumerate(batch):
        if job.unique_key is not None:
            results[index] = yield from _insert_unique(ignoring, job, payloads[index])
    if dialect == "postgresql":
        # Sent at commit only, and PostgreSQL folds repeats within a transaction: one per queue.
        for queue in sorted(wake_queues(batch, now.value)):
            yield Step(select(func.pg_notify(CHANNEL, queue)))
    return [r for r in results if r is not None]


def wake_queues(batch: Sequence[NewJob], now: datetime | None) -> set[str]:
    """Queues that got work runnable at once (a guess when now is the database's: hints only)."""
    moment = now or datetime.now(UTC)
    return {job.queue for job in batch if job.run_at is None or job.run_at <= moment}


def _insert_unique(
    ignoring: Any, job: NewJob, payload: str
) -> Generator[Step, list[Row[Any]], Inserted]:
    for _ in range(_UNIQUE_TRIES):
        rows = yield Step(ignoring.returning(jobs.c.id), _parameters(job, payload))
        if rows:
            return Inserted(id=rows[0].id, coalesced=False)
        rows = yield Step(
            select(jobs.c.id).where(
                jobs.c.name == job.name, jobs.c.unique_key == job.unique_key, ACTIVE
            )
        )
        if rows:
            return Inserted(id=rows[0].id, coalesced=True)
        # the holder finished between the two statements: the key is free, try again
    raise StoreError(
        f"job {job.name!r}: unique key {job.unique_key!r} kept changing hands; try again"
    )


def _insert_statement(dialect: str, now: Now, *, ignore_unique: bool = False) -> Any:
    run_at = func.coalesce(bindparam("run_at", type_=Instant), now.expr())
    payload: Any = bindparam("payload", type_=Text)
    if dialect == "postgresql":
        payload = cast(payload, postgresql.JSONB)
    values = dict(
        name=bindparam("name"),
        queue=bindparam("queue"),
        state=case((run_at <= now.expr(), "available"), else_="scheduled"),
        priority=bindparam("priority"),
        payload=payload,
        payload_version=bindparam("payload_version"),
        attempt=0,
        max_attempts=bindparam("max_attempts"),
        unique_key=bindparam("unique_key"),
        company=bindparam("company"),
        run_at=run_at,
        enqueued_at=now.expr(),
        fence=0,
        cancel_requested=False,
        tick=bindparam("tick", type_=Instant),
        ticks_skipped=bindparam("ticks_skipped"),
    )
    if not ignore_unique:
        return insert(jobs).values(values)
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        dialect_insert(jobs)
        .values(values)
        .on_conflict_do_nothing(
            index_elements=[jobs.c.name, jobs.c.unique_key], index_where=UNIQUE_ACTIVE
        )
    )


def _parameters(job: NewJob, payload: str) -> dict[str, Any]:
    return {
        "name": job.name,
        "queue": job.queue,
        "priority": job.priority,
        "payload": payload,
        "payload_version": job.payload_version,
        "max_attempts": job.max_attempts,
        "unique_key": job.unique_key,
        "company": job.company,
        "run_at": job.run_at,
        "tick": job.tick,
        "ticks_skipped": job.ticks_skipped,
    }


async def run_async(connection: AsyncConnection, plan: Plan) -> list[Inserted]:
    """Run a plan on an async connection (inside the caller's transaction)."""
    try:
        step = next(plan)
        while True:
            result = await connection.execute(step.statement, step.parameters)
            step = plan.send(list(result.all()) if result.returns_rows else [])
    except StopIteration as done:
        value: list[Inserted] = done.value
        return value


def run_sync(connection: Connection, plan: Plan) -> list[Inserted]:
    """Run a plan on a synchronous connection (inside the caller's transaction)."""
    try:
        step = next(plan)
        while True:
            result = connection.execute(step.statement, step.parameters)
            step = plan.send(list(result.all()) if result.returns_rows else [])
    except StopIteration as done:
        value: list[Inserted] = done.value
        return value
