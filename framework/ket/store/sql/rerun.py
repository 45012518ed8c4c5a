"""Reruns (RerunStore) in the SQL store: a finished job's work inserted again, linked to it.

An operator path, run on the engine (not the lane). The finished job's row is locked first
(`FOR UPDATE` on PostgreSQL, as an operator retry locks it; SQLite's write lock serialises
everything), so a retry racing the rerun cannot make the job run twice over: one of them finds
it no longer in the state it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.fetch import EngineRows, fetch_all, fetch_one
from ket.store.sql.insert import insert_plan, run_plan
from ket.store.sql.schema import jobs
from ket.store.types import TERMINAL_STATES, JobId, Reran, Rerun
from ket.store.validate import not_finished


async def rerun(
    connection: AsyncConnection, now: datetime | None, rerun: Rerun, payloads: Sequence[str]
) -> Reran:
    """Insert `rerun.job` linked to `rerun.origin` if that job has finished (inside the
    caller's transaction); `payloads` is the job's payload, encoded."""
    dialect = connection.dialect.name
    locked = select(jobs.c.state).where(jobs.c.id == rerun.origin)
    row = await fetch_one(
        connection, locked.with_for_update() if dialect == "postgresql" else locked
    )
    if row is None:
        return Reran(origin=rerun.origin, state=None, inserted=None, reason="no such job")
    if row.state not in TERMINAL_STATES:
        return Reran(
            origin=rerun.origin, state=row.state, inserted=None, reason=not_finished(row.state)
        )
    plan = insert_plan(dialect, now, [rerun.job], payloads)
    [inserted] = await run_plan(EngineRows(connection), plan)
    if not inserted.coalesced:  # a job that coalesced is another's: it reruns nothing
        link = update(jobs).where(jobs.c.id == inserted.id).values(rerun_of=rerun.origin)
        await connection.execute(link)
    return Reran(origin=rerun.origin, state=row.state, inserted=inserted)


async def reruns(connection: AsyncConnection, job_id: JobId) -> list[JobId]:
    """The ids of the jobs that rerun `job_id`, oldest first."""
    statement = select(jobs.c.id).where(jobs.c.rerun_of == job_id).order_by(jobs.c.id)
    return [row.id for row in await fetch_all(connection, statement)]
