"""Claim: which jobs are due, in which order, and what a claim writes on each."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ket.errors import JobRejected
from ket.store.types import JobClaim
from ket.tck.arrange import (
    LEASE,
    WORKER,
    after,
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
from ket.tck.harness import EPOCH, Tck, tck_test

__all__ = [
    "test_claim_does_not_take_executing_jobs_again",
    "test_claim_fence_grows_by_one_on_every_claim_of_the_same_job",
    "test_claim_from_an_empty_queue_returns_nothing",
    "test_claim_orders_by_priority_then_run_at_then_id",
    "test_claim_refuses_a_limit_below_one_a_lease_that_is_not_positive_and_no_queue",
    "test_claim_respects_the_limit_and_keeps_the_order_across_calls",
    "test_claim_sets_attempt_worker_lease_and_fence",
    "test_claim_takes_a_retryable_job_only_after_its_delay",
    "test_claim_takes_a_scheduled_job_once_it_is_due",
    "test_claim_takes_a_snoozed_job_once_its_delay_passes",
    "test_claim_takes_only_the_given_queue",
    "test_claim_takes_runnable_states_only",
]


@tck_test
async def test_claim_takes_only_the_given_queue(t: Tck) -> None:
    mail, sms = await insert(t.store, new_job(queue="mail"), new_job(queue="sms"))
    assert [c.id for c in await claim(t.store, "mail")] == [mail]
    assert await claim(t.store, "mail") == []
    assert (await get(t, sms)).state == "available"
    assert [c.id for c in await claim(t.store, "sms")] == [sms]


@tck_test
async def test_claim_from_an_empty_queue_returns_nothing(t: Tck) -> None:
    assert await claim(t.store, "nothing-here") == []
    await insert_one(t.store, new_job(queue="elsewhere"))
    assert await claim(t.store, "nothing-here") == []


@tck_test
async def test_claim_takes_a_scheduled_job_once_it_is_due(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(run_at=after(t, 60)))
    assert await claim(t.store) == []
    t.clock.advance(seconds=59.999)
    assert await claim(t.store) == []
    t.clock.advance(seconds=0.001)
    claimed = await claim_only(t.store, job_id)
    assert claimed.run_at == EPOCH + timedelta(seconds=60)


@tck_test
async def test_claim_takes_a_retryable_job_only_after_its_delay(t: Tck) -> None:
    job_id = await insert_one(t.store)
    first = await claim_only(t.store, job_id)
    await settle(t.store, first, "retryable", delay=120, error="boom")
    assert await claim(t.store) == []
    t.clock.advance(seconds=119)
    assert await claim(t.store) == []
    t.clock.advance(seconds=1)
    second = await claim_only(t.store, job_id)
    assert second.attempt == 2


@tck_test
async def test_claim_takes_a_snoozed_job_once_its_delay_passes(t: Tck) -> None:
    job_id = await insert_one(t.store)
    first = await claim_only(t.store, job_id)
    await settle(t.store, first, "snoozed", delay=30)
    assert await claim(t.store) == []
    t.clock.advance(seconds=30)
    again = await claim_only(t.store, job_id)
    assert (again.attempt, again.fence) == (1, first.fence + 1)


@tck_test
async def test_claim_takes_runnable_states_only(t: Tck) -> None:
    queue = "mixed"
    # arranged in this order so that arranging one never claims another
    for state in ("completed", "discarded", "cancelled", "executing"):
        await arrange(t, state, queue=queue)
    retryable = await arrange(t, "retryable", queue=queue)
    scheduled = await arrange(t, "scheduled", queue=queue)
    available = await arrange(t, "available", queue=queue)
    assert [c.id for c in await claim(t.store, queue)] == [available]
    t.clock.advance(hours=2)  # the scheduled and the retryable job are due now
    assert {c.id for c in await claim(t.store, queue)} == {retryable, scheduled}
    assert await claim(t.store, queue) == []


@tck_test
async def test_claim_orders_by_priority_then_run_at_then_id(t: Tck) -> None:
    now = t.clock.now()
    # (priority, seconds before now): several ties on priority and on run_at
    shapes = [(1, 10), (0, 5), (0, 10), (0, 10), (-5, 0), (1, 10), (0, 5), (1000, 3600), (-1000, 0)]
    jobs = [new_job(priority=p, run_at=now - timedelta(seconds=s)) for p, s in shapes]
    # inserted in an order unrelated to the claim order, and in several calls
    results = [*await insert(t.store, *jobs[4:]), *await insert(t.store, *jobs[:4])]
    keyed = zip([*shapes[4:], *shapes[:4]], results, strict=True)
    expected = [job_id for (p, s), job_id in sorted(keyed, key=lambda k: (k[0][0], -k[0][1], k[1]))]
    claimed = await claim(t.store, limit=100)
    assert [c.id for c in claimed] == expected
    assert [c.priority for c in claimed] == sorted(p for p, _ in shapes)


@tck_test
async def test_claim_respects_the_limit_and_keeps_the_order_across_calls(t: Tck) -> None:
    job_ids = await insert(t.store, *[new_job(priority=-n) for n in range(7)])
    expected = list(reversed(job_ids))  # the lowest priority value first
    batches = [await claim(t.store, limit=3) for _ in range(4)]
    assert [len(b) for b in batches] == [3, 3, 1, 0]
    assert [c.id for batch in batches for c in batch] == expected


@tck_test
async def test_claim_sets_attempt_worker_lease_and_fence(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(run_at=after(t, -5)))
    t.clock.advance(seconds=7)
    now = t.clock.now()
    claimed = await claim_only(t.store, job_id, worker_id="host-a:123", lease=45)
    assert (claimed.attempt, claimed.fence) == (1, 1)
    assert claimed.lease_until == now + timedelta(seconds=45)
    record = await get(t, job_id)
    assert (record.state, record.attempt, record.fence) == ("executing", 1, 1)
    assert (record.worker_id, record.attempted_at) == ("host-a:123", now)
    assert record.lease_until == now + timedelta(seconds=45)
    assert (record.finished_at, record.cancel_requested, record.errors) == (None, False, ())
    assert (record.run_at, record.enqueued_at) == (EPOCH - timedelta(seconds=5), EPOCH)


@tck_test
async def test_claim_does_not_take_executing_jobs_again(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id)
    t.clock.advance(seconds=LEASE / 2)
    assert await claim(t.store, worker_id="worker-other") == []
    assert (await get(t, job_id)).worker_id == WORKER


@tck_test
async def test_claim_fence_grows_by_one_on_every_claim_of_the_same_job(t: Tck) -> None:
    job_id = await insert_one(t.store)
    first = await claim_only(t.store, job_id)
    taken = await take_over(t, first)  # the lease expired: rescued and claimed again
    await settle(t.store, taken, "retryable", delay=0, error="boom")
    again = await claim_only(t.store, job_id)
    await settle(t.store, again, "snoozed", delay=0)
    last = await claim_only(t.store, job_id)
    assert [first.fence, taken.fence, again.fence, last.fence] == [1, 2, 3, 4]
    assert [first.attempt, taken.attempt, again.attempt, last.attempt] == [1, 2, 3, 3]
    assert (await get(t, job_id)).fence == 4


@tck_test
async def test_claim_refuses_a_limit_below_one_a_lease_that_is_not_positive_and_no_queue(
    t: Tck,
) -> None:
    job_id = await insert_one(t.store)
    bad = [
        JobClaim(queue="default", limit=0, worker_id=WORKER, lease_seconds=LEASE),
        JobClaim(queue="default", limit=-1, worker_id=WORKER, lease_seconds=LEASE),
        JobClaim(queue="default", limit=1, worker_id=WORKER, lease_seconds=0),
        JobClaim(queue="default", limit=1, worker_id=WORKER, lease_seconds=-30),
        JobClaim(queue="", limit=1, worker_id=WORKER, lease_seconds=LEASE),
        JobClaim(queue="default", limit=1, worker_id="", lease_seconds=LEASE),
    ]
    for claim_params in bad:
        with pytest.raises(JobRejected):
            await t.store.job_claim(claim_params)
    record = await get(t, job_id)
    assert (record.state, record.attempt, record.fence) == ("available", 0, 0)
