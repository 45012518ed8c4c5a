"""Schedules in the SQL store: state rows, the compare-and-set tick claim, the fire ledger."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.sql.insert import insert_plan, job_parameters, run_plan, ticks_in_one
from ket.store.types import Fire, Inserted, NewJob, ScheduleState, TickClaim, TickResult


def one_statement(dialect: str, claim: TickClaim) -> bool:
    """Whether `claim_tick` claims with one statement (so it needs no transaction of its own):
    an install, a reset, or on PostgreSQL a tick whose job has no unique key."""
    return claim.expected is None or claim.job is None or ticks_in_one(dialect, claim.job)


async def states(rows: Rows, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
    """The state rows of these schedules (absent: never installed)."""
    found = await rows.rows(stmt.SCHEDULE_STATES, {"schedule_ids": list(schedule_ids)})
    return {
        row.schedule_id: ScheduleState(
            schedule_id=row.schedule_id,
            fingerprint=row.fingerprint,
            last_tick=row.last_tick,
            paused=bool(row.paused),
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
    if claim.job is not None and ticks_in_one(rows.dialect, claim.job):
        # the job's tick is the claim's: one parameter, `p_tick`, for both
        given = {**job_parameters(claim.job, payloads[0], now), **params, **expected}
        found = await rows.tuples(stmt.INSERT_TICKED, {**given, "p_skipped": claim.skipped})
        if not found:
            return TickResult(won=False)
        return TickResult(won=True, job=Inserted(id=found[0][0], coalesced=False))
    moved = await rows.rows(stmt.SCHEDULE_MOVE, {**params, **expected})
    if len(moved) != 1:
        return TickResult(won=False)
    if claim.job is None:
        return TickResult(won=True)
    [inserted] = await run_plan(rows, insert_plan(rows.dialect, now, [claim.job], payloads))
    fire = {**params, "p_skipped": claim.skipped, "p_job_id": inserted.id}
    await rows.rows(stmt.RECORD_FIRE, fire)
    return TickResult(won=True, job=inserted)


async def pause(rows: Rows, now: datetime | None, schedule_id: str, paused: bool) -> bool:
    """Pause or resume; True when the row changed (a schedule never swept gets a row)."""
    params = {"now": now, "p_schedule_id": schedule_id, "p_paused": paused}
    return bool(await rows.rows(stmt.SCHEDULE_PAUSE, params))


async def run_now(
    rows: Rows, now: datetime | None, schedule_id: str, fingerprint: str, job: NewJob, payload: str
) -> Inserted:
    """Insert the schedule's job and its fire, as a tick would, without moving the schedule."""
    [inserted] = await run_plan(rows, insert_plan(rows.dialect, now, [job], [payload]))
    fire = {
        "now": now,
        "p_schedule_id": schedule_id,
        "p_fingerprint": fingerprint,
        "p_tick": job.tick,
        "p_skipped": 0,
        "p_job_id": inserted.id,
    }
    await rows.rows(stmt.RECORD_FIRE, fire)
    return inserted


async def fires(rows: Rows, schedule_id: str, limit: int) -> list[Fire]:
    """The schedule's fire ledger, newest first."""
    found = await rows.rows(stmt.SCHEDULE_FIRES, {"p_schedule_id": schedule_id, "limit": limit})
    return [
        Fire(
            schedule_id=row.schedule_id,
            fingerprint=row.fingerprint,
            tick=row.tick,
            skipped=row.skipped,
            job_id=row.job_id,
            fired_at=row.fired_at,
        )
        for row in found
    ]
