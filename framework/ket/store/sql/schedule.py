"""Schedules in the SQL store: state rows, the compare-and-set tick claim, the fire ledger."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows, fetch_all
from ket.store.sql.insert import insert_plan, run_plan
from ket.store.types import Fire, ScheduleState, TickClaim, TickResult

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


async def states(rows: Rows, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
    """The state rows of these schedules (absent: never installed)."""
    found = await rows.rows(stmt.SCHEDULE_STATES, {"schedule_ids": list(schedule_ids)})
    return {
        row.schedule_id: ScheduleState(
            schedule_id=row.schedule_id, fingerprint=row.fingerprint, last_tick=row.last_tick
        )
        for row in found
    }


async def claim_tick(
    rows: Rows, now: datetime | None, claim: TickClaim, payloads: Sequence[str]
) -> TickResult:
    """Install, or move the row by compare-and-set; the winner inserts its job and a fire."""
    params = {
        "now": now,
        "p_schedule_id": claim.schedule_id,
        "p_fingerprint": claim.fingerprint,
        "p_tick": claim.tick,
    }
    if claim.expected is None:
        return TickResult(won=bool(await rows.rows(stmt.SCHEDULE_INSTALL, params)))
    expected = {
        "p_expected_fingerprint": claim.expected.fingerprint,
        "p_expected_tick": claim.expected.last_tick,
    }
    moved = await rows.rows(stmt.SCHEDULE_MOVE, {**params, **expected})
    if len(moved) != 1:
        return TickResult(won=False)
    if claim.job is None:
        return TickResult(won=True)
    [inserted] = await run_plan(rows, insert_plan(rows.dialect, now, [claim.job], payloads))
    fire = {**params, "p_skipped": claim.skipped, "p_job_id": inserted.id}
    await rows.rows(stmt.RECORD_FIRE, fire)
    return TickResult(won=True, job=inserted)


async def fires(conn: AsyncConnection, schedule_id: str, limit: int) -> list[Fire]:
    """The schedule's fire ledger, newest first (an operator's read: on the engine)."""
    from sqlalchemy import select

    from ket.store.sql.schema import schedule_fires

    statement = (
        select(schedule_fires)
        .where(schedule_fires.c.schedule_id == schedule_id)
        .order_by(schedule_fires.c.tick.desc(), schedule_fires.c.id.desc())
        .limit(limit)
    )
    return [
        Fire(
            schedule_id=row.schedule_id,
            fingerprint=row.fingerprint,
            tick=row.tick,
            skipped=row.skipped,
            job_id=row.job_id,
            fired_at=row.fired_at,
        )
        for row in await fetch_all(conn, statement)
    ]
