"""Schedules: the tick claim the JobStore contract needs, the fire ledger QueryableStore
reads, and ScheduleControl's pause and run-now (statements in ket.store.sql.schedule).
"""

from __future__ import annotations

from collections.abc import Sequence

from ket.store import validate
from ket.store.sql import schedule
from ket.store.sql.capabilities.session import SqlSession
from ket.store.types import Fire, Inserted, NewJob, ScheduleState, TickClaim, TickResult


class SqlSchedules(SqlSession):
    """The schedule operations."""

    async def schedule_get(self, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
        """The state rows of these schedules."""
        validate.check_schedule_ids(schedule_ids)
        if not schedule_ids:
            return {}
        return await self._hot(lambda rows: schedule.states(rows, schedule_ids), single=True)

    async def schedule_claim_tick(self, claim: TickClaim) -> TickResult:
        """Compare-and-set the schedule's row; the winner inserts its job and ledger entry."""
        payloads = validate.check_tick_claim(claim)
        now = self._now()
        result = await self._hot(
            lambda rows: schedule.claim_tick(rows, now, claim, payloads),
            single=schedule.one_statement(self.dialect, claim),
        )
        if result.job is not None and claim.job is not None:
            self._woken([claim.job], now)
        return result

    async def schedule_fires(self, schedule_id: str, limit: int = 50) -> list[Fire]:
        """The schedule's fire ledger, newest first."""
        validate.check_schedule_ids([schedule_id])
        validate.check_count("fire list limit", limit, minimum=0)
        return await self._hot(lambda rows: schedule.fires(rows, schedule_id, limit), single=True)

    async def schedule_pause(self, schedule_id: str, paused: bool) -> bool:
        """Pause or resume a schedule for every replica; True when that changed its row."""
        validate.check_schedule_ids([schedule_id])
        now = self._now()
        return await self._hot(
            lambda rows: schedule.pause(rows, now, schedule_id, bool(paused)), single=True
        )

    async def schedule_run_now(self, schedule_id: str, fingerprint: str, job: NewJob) -> Inserted:
        """Insert a schedule's job and its fire now, leaving the schedule's ticks as they were."""
        [payload] = validate.check_run_now(schedule_id, fingerprint, job)
        now = self._now()
        inserted = await self._hot(
            lambda rows: schedule.run_now(rows, now, schedule_id, fingerprint, job, payload)
        )
        self._woken([job], now)
        return inserted
