"""Expiry (`expires_in`): a job not started within its expiry of its run time is never claimed;
the claim of its queue discards it, with one error record `expired`, paused queue or not, and
job stats count it per queue. A job that started in time runs on; its retry is still bound by
the expiry it was enqueued with. An operator's retry of an expired job runs it: the expiry
is lifted.
"""

from __future__ import annotations

from ket.errors import JobRejected
from ket.store.contract import QueueControl
from ket.store.types import EXPIRED
from ket.tck.arrange import (
    after,
    claim,
    claim_only,
    fresh_queue,
    get,
    insert_one,
    new_job,
    queryable,
    settle,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_job_claimed_in_time_runs_and_its_retry_past_the_expiry_is_discarded",
    "test_a_job_past_its_expiry_is_never_claimed_and_is_discarded_as_expired",
    "test_a_job_within_its_expiry_is_claimed",
    "test_a_paused_queue_s_expired_jobs_are_discarded_by_its_next_claim",
    "test_an_expiry_counts_from_the_job_s_run_time",
    "test_an_expiry_that_is_not_a_positive_number_of_seconds_is_refused",
    "test_an_operator_s_retry_of_an_expired_job_runs_it_whatever_its_expiry",
    "test_expired_jobs_are_counted_per_queue_in_stats",
]


@tck_test
async def test_a_job_within_its_expiry_is_claimed(t: Tck) -> None:
    queue = fresh_queue("fresh")
    job_id = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=600))
    t.clock.advance(seconds=599)
    await claim_only(t.store, job_id, queue)
    record = await get(t, job_id)
    assert record.expires_at == after(t, 1), record.expires_at


@tck_test
async def test_a_job_past_its_expiry_is_never_claimed_and_is_discarded_as_expired(
    t: Tck,
) -> None:
    queue = fresh_queue("late")
    late = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=60))
    t.clock.advance(seconds=30)
    fresh = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=60))
    plain = await insert_one(t.store, new_job(queue=queue))
    t.clock.advance(seconds=31)
    claimed = await claim(t.store, queue)
    assert sorted(c.id for c in claimed) == [fresh, plain]
    record = await get(t, late)
    assert record.state == "discarded"
    assert record.attempt == 0  # never started
    assert record.finished_at == t.clock.now()
    assert [(e.attempt, e.error) for e in record.errors] == [(0, EXPIRED)]


@tck_test
async def test_an_expiry_counts_from_the_job_s_run_time(t: Tck) -> None:
    queue = fresh_queue("delayed")
    job_id = await insert_one(
        t.store, new_job(queue=queue, run_at=after(t, 3_600), expires_in_seconds=60)
    )
    t.clock.advance(seconds=3_650)  # due 50 s ago, expires 10 s from now
    await claim_only(t.store, job_id, queue)


@tck_test
async def test_a_job_claimed_in_time_runs_and_its_retry_past_the_expiry_is_discarded(
    t: Tck,
) -> None:
    queue = fresh_queue("retry")
    job_id = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=60))
    running = await claim_only(t.store, job_id, queue)
    t.clock.advance(seconds=120)  # past the expiry while running: the attempt goes on
    await settle(t.store, running, "retryable", delay=10, error="boom")
    t.clock.advance(seconds=11)
    assert await claim(t.store, queue) == []
    record = await get(t, job_id)
    assert record.state == "discarded"
    assert [(e.attempt, e.error) for e in record.errors] == [(1, "boom"), (1, EXPIRED)]


@tck_test
async def test_a_paused_queue_s_expired_jobs_are_discarded_by_its_next_claim(t: Tck) -> None:
    control = t.require(QueueControl)  # type: ignore[type-abstract]
    queue = fresh_queue("paused")
    job_id = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=60))
    await control.queue_pause(queue, paused_by="alice@ops")
    t.clock.advance(seconds=61)
    assert await claim(t.store, queue) == []
    assert (await get(t, job_id)).state == "discarded"
    await control.queue_resume(queue)
    assert await claim(t.store, queue) == []


@tck_test
async def test_expired_jobs_are_counted_per_queue_in_stats(t: Tck) -> None:
    queue, other = fresh_queue("counted"), fresh_queue("other")
    for _ in range(2):
        await insert_one(t.store, new_job(queue=queue, expires_in_seconds=10))
    await insert_one(t.store, new_job(queue=other, expires_in_seconds=10))
    t.clock.advance(seconds=11)
    assert await claim(t.store, queue) == []
    stats = await queryable(t).job_stats()
    assert stats.expired.get(queue) == 2
    assert stats.counts.get(("discarded", queue)) == 2
    assert other not in stats.expired  # not claimed yet: it waits, and it is never started


@tck_test
async def test_an_expiry_that_is_not_a_positive_number_of_seconds_is_refused(t: Tck) -> None:
    queue = fresh_queue("refused")
    for bad in (0, -5, float("nan"), float("inf"), True, "10m"):
        try:
            await insert_one(t.store, new_job(queue=queue, expires_in_seconds=bad))
        except JobRejected as error:
            assert "expires_in" in str(error) and repr(bad) in str(error), error
        else:
            raise AssertionError(f"an expiry of {bad!r} was accepted")
    assert await claim(t.store, queue) == []


@tck_test
async def test_an_operator_s_retry_of_an_expired_job_runs_it_whatever_its_expiry(t: Tck) -> None:
    queue = fresh_queue("retried")
    job_id = await insert_one(t.store, new_job(queue=queue, expires_in_seconds=60))
    t.clock.advance(seconds=61)
    assert await claim(t.store, queue) == []
    change = await t.store.job_retry(job_id)
    assert change.state == "available", change
    assert (await get(t, job_id)).expires_at is None
    await claim_only(t.store, job_id, queue)
