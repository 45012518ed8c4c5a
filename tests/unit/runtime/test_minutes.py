"""The minute counter asks the store to count once an interval, and an idle tenant's only
every IDLE_EVERY ticks."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from ket.runtime.lease import Attempts
from ket.runtime.minutes import IDLE_EVERY, MinuteService
from ket.store import JobClaim, NewJob
from ket.store.clock import ManualClock
from ket.store.memory import MemoryStore
from ket.store.types import MinuteQuery

START = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


def test_an_idle_tenant_is_counted_every_idle_every_ticks_and_a_busy_one_every_tick() -> None:
    async def scenario() -> list[int]:
        clock = ManualClock(START)
        store = MemoryStore(clock=clock)
        attempts = Attempts(lease_seconds=30)
        service = MinuteService(store, attempts, interval=60)
        seen: list[int] = []
        for tick in range(2 * IDLE_EVERY + 2):
            if tick == IDLE_EVERY + 3:  # the worker starts a job: the next tick counts
                await store.job_insert([NewJob(name="a.job")])
                [claimed] = await store.job_claim(
                    JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
                )
                attempts.add(claimed, sent=0.0)
            before = store.database.minutes.seen_at
            await service.tick()
            if store.database.minutes.seen_at != before:
                seen.append(tick)
            clock.advance(seconds=60)
        return seen

    # the first tick, the tenth idle one, and the first after the worker started a job
    assert asyncio.run(scenario()) == [0, IDLE_EVERY, IDLE_EVERY + 3]


def test_a_count_reaches_the_store_with_what_it_counts() -> None:
    async def scenario() -> list[int]:
        clock = ManualClock(START)
        store = MemoryStore(clock=clock)
        attempts = Attempts(lease_seconds=30)
        service = MinuteService(store, attempts, interval=60)
        await service.tick()
        await store.job_insert([NewJob(name="a.job") for _ in range(3)])
        for _ in range(2):
            clock.advance(seconds=60)
            attempts.started += 1  # busy: every tick counts
            await service.tick()
        listed = await store.minute_list(MinuteQuery(since=START - timedelta(hours=1)))
        return [m.enqueued for m in listed.minutes if m.enqueued]

    assert asyncio.run(scenario()) == [3]


def test_an_interval_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        MinuteService(MemoryStore(), Attempts(lease_seconds=30), interval=0)
