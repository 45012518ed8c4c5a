"""Heartbeat: leases still held are extended; the rest are reported lost; cancels are reported."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ket.errors import JobRejected
from ket.store.types import Heartbeat, HeartbeatResult, Lease
from ket.tck.arrange import (
    UNKNOWN_ID,
    arrange,
    claim,
    claim_only,
    get,
    insert,
    insert_one,
    new_job,
    settle,
    take_over,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_heartbeat_extends_a_lease_that_expired_but_was_not_rescued",
    "test_heartbeat_extends_the_lease_to_now_plus_lease_seconds",
    "test_heartbeat_keeps_running_work_from_being_rescued",
    "test_heartbeat_refuses_a_lease_that_is_not_positive",
    "test_heartbeat_reports_a_lease_of_a_job_that_is_not_executing_as_lost",
    "test_heartbeat_reports_a_stale_fence_as_lost_and_leaves_the_new_lease_alone",
    "test_heartbeat_reports_requested_cancels_among_the_extended",
    "test_heartbeat_with_no_leases_changes_nothing",
]


@tck_test
async def test_heartbeat_extends_the_lease_to_now_plus_lease_seconds(t: Tck) -> None:
    first, second = await insert(t.store, new_job(), new_job())
    claimed = await claim(t.store, lease=30)
    t.clock.advance(seconds=20)
    result = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=c.id, fence=c.fence) for c in claimed], lease_seconds=45)
    )
    assert (sorted(result.extended), result.lost, result.cancel_requested) == (
        sorted([first, second]),
        (),
        (),
    )
    deadline = t.clock.now() + timedelta(seconds=45)
    assert [(await get(t, job_id)).lease_until for job_id in (first, second)] == [deadline] * 2
    assert (await get(t, first)).state == "executing"


@tck_test
async def test_heartbeat_keeps_running_work_from_being_rescued(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id, lease=10)
    for _ in range(3):
        t.clock.advance(seconds=8)
        beat = await t.store.job_heartbeat(
            Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=10)
        )
        assert beat.extended == (job_id,)
        assert await t.store.job_rescue() == []
    record = await get(t, job_id)
    assert (record.state, record.fence, record.attempt) == ("executing", claimed.fence, 1)


@tck_test
async def test_heartbeat_extends_a_lease_that_expired_but_was_not_rescued(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id, lease=10)
    t.clock.advance(seconds=15)
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=10)
    )
    assert beat.extended == (job_id,)
    assert (await get(t, job_id)).lease_until == t.clock.now() + timedelta(seconds=10)
    assert await t.store.job_rescue() == []


@tck_test
async def test_heartbeat_reports_a_stale_fence_as_lost_and_leaves_the_new_lease_alone(
    t: Tck,
) -> None:
    job_id = await insert_one(t.store)
    old = await claim_only(t.store, job_id, lease=10)
    new = await take_over(t, old)
    t.clock.advance(seconds=3)
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=job_id, fence=old.fence)], lease_seconds=600)
    )
    assert beat == HeartbeatResult(extended=(), lost=(job_id,), cancel_requested=())
    record = await get(t, job_id)
    assert (record.lease_until, record.fence) == (new.lease_until, new.fence)


@tck_test
async def test_heartbeat_reports_a_lease_of_a_job_that_is_not_executing_as_lost(t: Tck) -> None:
    job_ids = [
        await arrange(t, state)
        for state in ("available", "scheduled", "retryable", "completed", "discarded", "cancelled")
    ]
    live = await claim_only(t.store, await insert_one(t.store, new_job(queue="live")), "live")
    before = [await get(t, job_id) for job_id in job_ids]
    leases = [Lease(id=job_id, fence=1) for job_id in [*job_ids, UNKNOWN_ID]]
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[*leases, Lease(id=live.id, fence=live.fence)], lease_seconds=60)
    )
    assert beat.extended == (live.id,)
    assert sorted(beat.lost) == sorted([*job_ids, UNKNOWN_ID])
    assert beat.cancel_requested == ()
    assert [await get(t, job_id) for job_id in job_ids] == before


@tck_test
async def test_heartbeat_reports_requested_cancels_among_the_extended(t: Tck) -> None:
    doomed, kept = await insert(t.store, new_job(), new_job())
    claimed = await claim(t.store)
    change = await t.store.job_cancel(doomed)
    assert (change.previous, change.state) == ("executing", "executing")
    leases = [Lease(id=c.id, fence=c.fence) for c in claimed]
    beat = await t.store.job_heartbeat(Heartbeat(leases=leases, lease_seconds=30))
    assert (sorted(beat.extended), beat.lost) == (sorted([doomed, kept]), ())
    assert beat.cancel_requested == (doomed,)
    # a cancel request is reported by every heartbeat until the worker settles the job
    again = await t.store.job_heartbeat(Heartbeat(leases=leases, lease_seconds=30))
    assert again.cancel_requested == (doomed,)
    by_id = {c.id: c for c in claimed}
    await settle(t.store, by_id[doomed], "cancelled")
    after_settle = await t.store.job_heartbeat(Heartbeat(leases=leases, lease_seconds=30))
    assert (after_settle.extended, after_settle.lost) == ((kept,), (doomed,))
    assert after_settle.cancel_requested == ()


@tck_test
async def test_heartbeat_with_no_leases_changes_nothing(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    beat = await t.store.job_heartbeat(Heartbeat(leases=[], lease_seconds=30))
    assert beat == HeartbeatResult(extended=(), lost=(), cancel_requested=())
    assert (await get(t, job_id)).lease_until == claimed.lease_until


@tck_test
async def test_heartbeat_refuses_a_lease_that_is_not_positive(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    t.clock.advance(seconds=5)
    for lease in (0, -10):
        with pytest.raises(JobRejected):
            await t.store.job_heartbeat(
                Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=lease)
            )
    assert (await get(t, job_id)).lease_until == claimed.lease_until
