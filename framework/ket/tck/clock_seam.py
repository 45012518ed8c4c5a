"""Time: every "now" comes from the manual clock when a store has one, else from the store itself.

The `store_time` tests are the kit's only real sleeps (about a second in all): they prove that a
store opened without a clock tells real, aware UTC time and that its leases and due times follow it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ket.store.types import NewJob
from ket.tck.arrange import claim, claim_only, get, insert_one, new_job
from ket.tck.harness import EPOCH, Scenario, StoreFactory, Tck, tck_test

__all__ = [
    "test_manual_clock_decides_due_times_not_the_machine_clock",
    "test_manual_clock_is_shared_by_every_replica",
    "test_now_is_the_manual_clock",
    "test_store_time_counts_a_delay_from_the_insert",
    "test_store_time_expires_a_lease_in_real_time",
    "test_store_time_is_aware_and_close_to_real_utc",
    "test_store_time_makes_a_scheduled_job_due_in_real_time",
]

# tck_test(...) is typed Any, which strict mypy refuses as a decorator: name its type once.
on_store_time: Callable[[Scenario], Callable[[StoreFactory], None]] = tck_test(store_time=True)

# How far a store's own clock may stray from this machine's in the store_time tests.
TOLERANCE = timedelta(seconds=5)


@tck_test
async def test_now_is_the_manual_clock(t: Tck) -> None:
    assert await t.store.now() == EPOCH
    t.clock.advance(seconds=90.5)
    assert await t.store.now() == EPOCH + timedelta(seconds=90.5)
    t.clock.set(datetime(2031, 6, 1, tzinfo=UTC))
    assert await t.store.now() == datetime(2031, 6, 1, tzinfo=UTC)


@tck_test
async def test_manual_clock_is_shared_by_every_replica(t: Tck) -> None:
    replica = await t.replica()
    t.clock.advance(minutes=5)
    assert await replica.now() == await t.store.now() == EPOCH + timedelta(minutes=5)
    job_id = await insert_one(replica, new_job(run_at=EPOCH + timedelta(minutes=10)))
    assert await claim(t.store) == []
    t.clock.advance(minutes=5)
    assert (await claim_only(t.store, job_id)).enqueued_at == EPOCH + timedelta(minutes=5)


@tck_test
async def test_manual_clock_decides_due_times_not_the_machine_clock(t: Tck) -> None:
    long_ago = datetime(2001, 1, 1, tzinfo=UTC)
    t.clock.set(long_ago)
    machine_now = datetime.now(UTC)  # long past for this machine, years ahead for the store
    waiting = await insert_one(t.store, NewJob(name="kit.later", run_at=machine_now))
    assert await claim(t.store) == []
    assert (await get(t, waiting)).state == "scheduled"
    due = await insert_one(t.store, NewJob(name="kit.now", queue="now"))
    claimed = await claim_only(t.store, due, "now", lease=60)
    assert (claimed.run_at, claimed.enqueued_at) == (long_ago, long_ago)
    assert claimed.lease_until == long_ago + timedelta(seconds=60)


@on_store_time
async def test_store_time_is_aware_and_close_to_real_utc(t: Tck) -> None:
    now = await t.store.now()
    assert now.utcoffset() is not None, f"the store's now is naive: {now!r}"
    assert abs(now - datetime.now(UTC)) < TOLERANCE
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    assert abs(claimed.enqueued_at - datetime.now(UTC)) < TOLERANCE
    assert claimed.enqueued_at >= now


@on_store_time
async def test_store_time_expires_a_lease_in_real_time(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id, lease=0.4)
    assert await t.store.job_rescue() == []
    await asyncio.sleep(0.6)
    assert [r.id for r in await t.store.job_rescue()] == [job_id]


@on_store_time
async def test_store_time_makes_a_scheduled_job_due_in_real_time(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(run_at=await t.store.now() + timedelta(seconds=3)))
    assert await claim(t.store) == []
    soon = await insert_one(
        t.store, new_job(queue="soon", run_at=await t.store.now() + timedelta(seconds=0.3))
    )
    assert await claim(t.store, "soon") == []
    await asyncio.sleep(0.5)
    assert [c.id for c in await claim(t.store, "soon")] == [soon]
    assert await claim(t.store) == [], f"job {job_id}, due in 3 s, was claimed after 0.5 s"


@on_store_time
async def test_store_time_counts_a_delay_from_the_insert(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(delay_seconds=600))
    record = await get(t, job_id)
    assert record.state == "scheduled"
    assert record.run_at - record.enqueued_at == timedelta(seconds=600)
    assert abs(record.enqueued_at - datetime.now(UTC)) < TOLERANCE
