"""Rescue: expired leases go back to work (or are discarded, or cancelled), live ones never.

And the grace a rescuer gives before its first rescue after an outage: every executing lease
lasts at least so long from now, expired ones included, and its holder keeps it.
"""

from __future__ import annotations

import pytest

from ket.errors import JobRejected
from ket.store.types import Heartbeat, Lease, Rescued
from ket.tck.arrange import (
    after,
    claim,
    claim_only,
    get,
    insert,
    insert_one,
    new_job,
    settle,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_grace_keeps_its_holders_lease_and_fence",
    "test_grace_lengthens_every_lease_ending_sooner_and_rescue_waits_for_it",
    "test_grace_refuses_seconds_that_are_not_positive",
    "test_rescue_cancels_an_expired_job_with_a_cancel_request",
    "test_rescue_discards_an_expired_job_at_its_last_attempt",
    "test_rescue_leaves_a_lease_that_expires_exactly_now",
    "test_rescue_makes_an_expired_job_retryable_now_with_the_error_recorded",
    "test_rescue_never_touches_a_live_lease",
    "test_rescue_prefers_cancel_over_discard",
    "test_rescue_respects_the_limit",
    "test_rescue_with_nothing_expired_returns_nothing",
    "test_rescued_job_is_claimed_again_with_the_next_attempt_and_fence",
]


def _lease_error(worker_id: str) -> str:
    return f"lease expired: worker {worker_id} stopped heartbeating"


@tck_test
async def test_rescue_makes_an_expired_job_retryable_now_with_the_error_recorded(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job("kit.rescued", queue="mail", max_attempts=3))
    claimed = await claim_only(t.store, job_id, "mail", worker_id="host-a:1", lease=10)
    t.clock.advance(seconds=11)
    now = t.clock.now()
    rescued = await t.store.job_rescue()
    assert rescued == [
        Rescued(
            id=job_id,
            name="kit.rescued",
            queue="mail",
            state="retryable",
            attempt=1,
            worker_id="host-a:1",
        )
    ]
    record = await get(t, job_id)
    assert (record.state, record.run_at, record.lease_until) == ("retryable", now, None)
    assert (record.attempt, record.fence, record.finished_at) == (1, claimed.fence, None)
    assert [(e.attempt, e.at, e.error) for e in record.errors] == [
        (1, now, _lease_error("host-a:1"))
    ]


@tck_test
async def test_rescued_job_is_claimed_again_with_the_next_attempt_and_fence(t: Tck) -> None:
    job_id = await insert_one(t.store)
    first = await claim_only(t.store, job_id, lease=10)
    t.clock.advance(seconds=11)
    assert [r.id for r in await t.store.job_rescue()] == [job_id]
    second = await claim_only(t.store, job_id, worker_id="worker-2")
    assert (second.attempt, second.fence) == (2, first.fence + 1)


@tck_test
async def test_rescue_leaves_a_lease_that_expires_exactly_now(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id, lease=10)
    t.clock.advance(seconds=10)
    assert await t.store.job_rescue() == []
    assert (await get(t, job_id)).state == "executing"
    t.clock.advance(seconds=0.001)
    assert [r.id for r in await t.store.job_rescue()] == [job_id]


@tck_test
async def test_rescue_never_touches_a_live_lease(t: Tck) -> None:
    short, long = await insert(t.store, new_job(queue="short"), new_job(queue="long"))
    await claim_only(t.store, short, "short", lease=10)
    await claim_only(t.store, long, "long", lease=60)
    t.clock.advance(seconds=30)
    live_before = await get(t, long)
    assert [r.id for r in await t.store.job_rescue()] == [short]
    assert await get(t, long) == live_before
    assert await t.store.job_rescue() == []
    t.clock.advance(seconds=31)
    assert [r.id for r in await t.store.job_rescue()] == [long]


@tck_test
async def test_rescue_discards_an_expired_job_at_its_last_attempt(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(max_attempts=2))
    await claim_only(t.store, job_id, lease=10)
    t.clock.advance(seconds=11)
    first_rescue = t.clock.now()
    assert [r.state for r in await t.store.job_rescue()] == ["retryable"]
    await claim_only(t.store, job_id, worker_id="worker-2", lease=10)
    t.clock.advance(seconds=11)
    now = t.clock.now()
    rescued = await t.store.job_rescue()
    assert [(r.id, r.state, r.attempt, r.worker_id) for r in rescued] == [
        (job_id, "discarded", 2, "worker-2")
    ]
    record = await get(t, job_id)
    assert (record.state, record.finished_at, record.lease_until) == ("discarded", now, None)
    assert [(e.attempt, e.at, e.error) for e in record.errors] == [
        (1, first_rescue, _lease_error("worker-1")),
        (2, now, _lease_error("worker-2")),
    ]


@tck_test
async def test_rescue_cancels_an_expired_job_with_a_cancel_request(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id, lease=10)
    await t.store.job_cancel(job_id)
    t.clock.advance(seconds=11)
    now = t.clock.now()
    rescued = await t.store.job_rescue()
    assert [(r.id, r.state) for r in rescued] == [(job_id, "cancelled")]
    record = await get(t, job_id)
    assert (record.state, record.finished_at, record.lease_until) == ("cancelled", now, None)
    assert [e.error for e in record.errors] == [_lease_error("worker-1")]
    assert await claim(t.store) == []


@tck_test
async def test_rescue_prefers_cancel_over_discard(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(max_attempts=1))
    await claim_only(t.store, job_id, lease=10)
    await t.store.job_cancel(job_id)
    t.clock.advance(seconds=11)
    assert [(r.id, r.state) for r in await t.store.job_rescue()] == [(job_id, "cancelled")]
    assert (await get(t, job_id)).state == "cancelled"


@tck_test
async def test_rescue_respects_the_limit(t: Tck) -> None:
    job_ids = await insert(t.store, *[new_job() for _ in range(5)])
    await claim(t.store, lease=10)
    t.clock.advance(seconds=11)
    first = await t.store.job_rescue(limit=2)
    assert len(first) == 2
    states = [(await get(t, job_id)).state for job_id in job_ids]
    assert sorted(states) == ["executing"] * 3 + ["retryable"] * 2
    rest = await t.store.job_rescue(limit=10)
    assert sorted(r.id for r in [*first, *rest]) == sorted(job_ids)
    assert await t.store.job_rescue(limit=10) == []


@tck_test
async def test_rescue_with_nothing_expired_returns_nothing(t: Tck) -> None:
    assert await t.store.job_rescue() == []
    job_id = await insert_one(t.store, new_job(run_at=after(t, 5)))
    done = await claim_only(t.store, await insert_one(t.store, new_job(queue="done")), "done")
    await settle(t.store, done, "completed")
    t.clock.advance(days=2)
    assert await t.store.job_rescue() == []
    assert (await get(t, job_id)).state == "scheduled"
    assert (await get(t, done.id)).errors == ()


@tck_test
async def test_grace_lengthens_every_lease_ending_sooner_and_rescue_waits_for_it(t: Tck) -> None:
    expired, ending, long = await insert(
        t.store, new_job(queue="a"), new_job(queue="b"), new_job(queue="c")
    )
    waiting = await insert_one(t.store, new_job(queue="d"))
    await claim_only(t.store, expired, "a", lease=10)
    await claim_only(t.store, ending, "b", lease=25)
    await claim_only(t.store, long, "c", lease=60)
    t.clock.advance(seconds=20)
    untouched = [await get(t, long), await get(t, waiting)]
    assert await t.store.job_grace(10) == 2
    until = after(t, 10)
    assert [(await get(t, i)).lease_until for i in (expired, ending)] == [until, until]
    assert [await get(t, long), await get(t, waiting)] == untouched
    assert await t.store.job_rescue() == []
    assert await t.store.job_grace(10) == 0  # none ends sooner now
    t.clock.advance(seconds=10.001)
    assert sorted(r.id for r in await t.store.job_rescue()) == sorted([expired, ending])


@tck_test
async def test_grace_keeps_its_holders_lease_and_fence(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id, lease=10)
    t.clock.advance(seconds=30)
    assert await t.store.job_grace(10) == 1
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=10)
    )
    assert beat.extended == (job_id,)
    record = await get(t, job_id)
    assert (record.fence, record.worker_id, record.errors) == (claimed.fence, "worker-1", ())
    await settle(t.store, claimed, "completed")
    assert (await get(t, job_id)).state == "completed"


@tck_test
async def test_grace_refuses_seconds_that_are_not_positive(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id, lease=1)
    t.clock.advance(seconds=2)
    for seconds in (0, -1, float("nan"), float("inf"), True, "5"):
        with pytest.raises(JobRejected, match="grace seconds must be a positive"):
            await t.store.job_grace(seconds)  # type: ignore[arg-type]
    assert (await get(t, job_id)).lease_until is not None
    assert [r.id for r in await t.store.job_rescue()] == [job_id]
