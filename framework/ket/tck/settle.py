"""Settle: each outcome's resulting row, the error history, and the fence that guards them."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from ket.errors import JobRejected
from ket.store.types import ClaimedJob, ErrorInfo, ErrorRecord, JobRecord, Outcome, Settle
from ket.tck.arrange import (
    UNKNOWN_ID,
    WORKER,
    arrange,
    claim,
    claim_only,
    get,
    insert,
    insert_one,
    new_job,
    settle,
    settlement,
    take_over,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_settle_applies_a_mixed_batch_in_one_call",
    "test_settle_cancelled_makes_the_job_cancelled_with_its_error",
    "test_settle_completed_makes_the_job_completed",
    "test_settle_completed_records_no_error_even_when_given_one",
    "test_settle_discarded_makes_the_job_discarded_with_its_error",
    "test_settle_discarded_without_error_records_no_error",
    "test_settle_keeps_the_error_history_in_order_with_attempt_numbers",
    "test_settle_of_a_job_that_is_not_executing_is_refused",
    "test_settle_of_an_unknown_job_is_refused",
    "test_settle_refuses_a_batch_with_a_bad_settlement_and_applies_none_of_it",
    "test_settle_retryable_makes_the_job_retryable_after_the_delay",
    "test_settle_snoozed_gives_the_attempt_back_and_records_its_note",
    "test_settle_snoozed_without_delay_makes_the_job_available",
    "test_settling_twice_is_refused_and_the_first_outcome_stands",
    "test_stale_fence_is_refused_on_cancelled",
    "test_stale_fence_is_refused_on_complete",
    "test_stale_fence_is_refused_on_discarded",
    "test_stale_fence_is_refused_on_retryable",
    "test_stale_fence_is_refused_on_snoozed",
    "test_stale_fence_is_refused_within_a_batch_and_the_rest_applies",
]


async def _executing(t: Tck, queue: str = "default") -> ClaimedJob:
    """A job claimed by WORKER, a minute after it was enqueued."""
    job_id = await insert_one(t.store, new_job(queue=queue))
    t.clock.advance(seconds=60)
    return await claim_only(t.store, job_id, queue)


def _cleared(record: JobRecord, claimed: ClaimedJob) -> None:
    """What every outcome does: the lease is gone, the worker stays for the record."""
    assert record.lease_until is None
    assert record.worker_id == WORKER
    assert record.fence == claimed.fence


# -- each outcome ---------------------------------------------------------------------------------


@tck_test
async def test_settle_completed_makes_the_job_completed(t: Tck) -> None:
    claimed = await _executing(t)
    t.clock.advance(seconds=5)
    await settle(t.store, claimed, "completed")
    record = await get(t, claimed.id)
    assert (record.state, record.finished_at, record.attempt) == ("completed", t.clock.now(), 1)
    assert record.run_at == claimed.run_at
    assert record.errors == ()
    _cleared(record, claimed)


@tck_test
async def test_settle_retryable_makes_the_job_retryable_after_the_delay(t: Tck) -> None:
    claimed = await _executing(t)
    started = t.clock.now()
    t.clock.advance(seconds=5)
    now = t.clock.now()
    await settle(t.store, claimed, "retryable", delay=90, error="timeout talking to the bank")
    record = await get(t, claimed.id)
    assert (record.state, record.run_at, record.finished_at) == (
        "retryable",
        now + timedelta(seconds=90),
        None,
    )
    assert record.attempt == 1
    assert record.errors == (
        ErrorRecord(
            attempt=1,
            at=now,
            error="timeout talking to the bank",
            traceback="Traceback: timeout talking to the bank",
            started_at=started,  # the failed attempt's start, and who ran it
            worker_id=WORKER,
        ),
    )
    _cleared(record, claimed)


@tck_test
async def test_settle_discarded_makes_the_job_discarded_with_its_error(t: Tck) -> None:
    claimed = await _executing(t)
    t.clock.advance(seconds=5)
    now = t.clock.now()
    await settle(t.store, claimed, "discarded", error="no such customer")
    record = await get(t, claimed.id)
    assert (record.state, record.finished_at, record.attempt) == ("discarded", now, 1)
    assert [(e.attempt, e.at, e.error) for e in record.errors] == [(1, now, "no such customer")]
    _cleared(record, claimed)


@tck_test
async def test_settle_discarded_without_error_records_no_error(t: Tck) -> None:
    claimed = await _executing(t)
    await settle(t.store, claimed, "discarded")
    record = await get(t, claimed.id)
    assert (record.state, record.finished_at, record.errors) == (
        "discarded",
        t.clock.now(),
        (),
    )


@tck_test
async def test_settle_cancelled_makes_the_job_cancelled_with_its_error(t: Tck) -> None:
    claimed = await _executing(t)
    started = t.clock.now()
    t.clock.advance(seconds=5)
    now = t.clock.now()
    result = await t.store.job_settle(
        [
            Settle(
                id=claimed.id,
                fence=claimed.fence,
                outcome="cancelled",
                error=ErrorInfo(error="aborted: cancelled", traceback=None),
            )
        ]
    )
    assert result.applied == (claimed.id,)
    record = await get(t, claimed.id)
    assert (record.state, record.finished_at) == ("cancelled", now)
    assert record.errors == (
        ErrorRecord(
            attempt=1,
            at=now,
            error="aborted: cancelled",
            traceback=None,
            started_at=started,
            worker_id=WORKER,
        ),
    )
    _cleared(record, claimed)


@tck_test
async def test_settle_snoozed_gives_the_attempt_back_and_records_its_note(t: Tck) -> None:
    claimed = await _executing(t)
    now = t.clock.now()
    await settle(t.store, claimed, "snoozed", delay=300, error="not ready yet")
    record = await get(t, claimed.id)
    assert (record.state, record.run_at) == ("scheduled", now + timedelta(seconds=300))
    assert (record.attempt, record.finished_at) == (0, None)
    # the entry names the attempt that snoozed
    assert [(e.attempt, e.at, e.error) for e in record.errors] == [(1, now, "not ready yet")]
    _cleared(record, claimed)
    t.clock.advance(seconds=300)
    again = await claim_only(t.store, claimed.id)
    assert again.attempt == 1  # the same attempt runs again


@tck_test
async def test_settle_snoozed_without_delay_makes_the_job_available(t: Tck) -> None:
    claimed = await _executing(t)
    now = t.clock.now()
    await settle(t.store, claimed, "snoozed", delay=0)
    record = await get(t, claimed.id)
    assert (record.state, record.run_at, record.attempt) == ("available", now, 0)
    assert (await claim_only(t.store, claimed.id)).attempt == 1


@tck_test
async def test_settle_keeps_the_error_history_in_order_with_attempt_numbers(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(max_attempts=5))
    expected: list[tuple[int, datetime, str]] = []
    for attempt in (1, 2, 3):
        claimed = await claim_only(t.store, job_id)
        assert claimed.attempt == attempt
        t.clock.advance(seconds=attempt)
        expected.append((attempt, t.clock.now(), f"failure {attempt}"))
        await settle(t.store, claimed, "retryable", delay=10, error=f"failure {attempt}")
        t.clock.advance(seconds=10)
    claimed = await claim_only(t.store, job_id)
    await settle(t.store, claimed, "snoozed", delay=0)  # no entry, attempt given back
    claimed = await claim_only(t.store, job_id)
    assert claimed.attempt == 4
    expected.append((4, t.clock.now(), "gave up"))
    await settle(t.store, claimed, "discarded", error="gave up")
    record = await get(t, job_id)
    assert [(e.attempt, e.at, e.error) for e in record.errors] == expected
    assert [e.traceback for e in record.errors] == [f"Traceback: {e[2]}" for e in expected]


@tck_test
async def test_settle_applies_a_mixed_batch_in_one_call(t: Tck) -> None:
    outcomes: list[Outcome] = ["completed", "retryable", "discarded", "snoozed", "cancelled"]
    job_ids = await insert(t.store, *[new_job(f"kit.{o}") for o in outcomes])
    claimed = {c.id: c for c in await claim(t.store)}
    assert set(claimed) == set(job_ids)
    batch = [
        settlement(claimed[job_id], outcome, delay=60, error=f"{outcome} error")
        if outcome in ("retryable", "discarded", "cancelled")
        else settlement(claimed[job_id], outcome, delay=60)
        for job_id, outcome in zip(job_ids, outcomes, strict=True)
    ]
    result = await t.store.job_settle(batch)
    assert (sorted(result.applied), result.refused) == (sorted(job_ids), ())
    states = [(await get(t, job_id)).state for job_id in job_ids]
    assert states == ["completed", "retryable", "discarded", "scheduled", "cancelled"]
    errors = [[e.error for e in (await get(t, job_id)).errors] for job_id in job_ids]
    assert errors == [[], ["retryable error"], ["discarded error"], [], ["cancelled error"]]


@tck_test
async def test_settle_completed_records_no_error_even_when_given_one(t: Tck) -> None:
    claimed = await _executing(t)
    await settle(t.store, claimed, "completed", error="not an error")
    assert (await get(t, claimed.id)).errors == ()


# -- the fence ------------------------------------------------------------------------------------


async def _stale_refused(t: Tck, outcome: Outcome) -> None:
    """After a takeover the old holder's `outcome` is refused; the new holder's stands."""
    old = await _executing(t)
    new = await take_over(t, old)
    before = await get(t, old.id)
    result = await t.store.job_settle([settlement(old, outcome, delay=5, error="late")])
    assert (result.applied, result.refused) == ((), (old.id,))
    assert await get(t, old.id) == before
    await settle(t.store, new, "completed")
    record = await get(t, old.id)
    assert (record.state, record.fence, record.attempt) == ("completed", new.fence, 2)
    assert "late" not in [e.error for e in record.errors]


@tck_test
async def test_stale_fence_is_refused_on_complete(t: Tck) -> None:
    await _stale_refused(t, "completed")


@tck_test
async def test_stale_fence_is_refused_on_retryable(t: Tck) -> None:
    await _stale_refused(t, "retryable")


@tck_test
async def test_stale_fence_is_refused_on_discarded(t: Tck) -> None:
    await _stale_refused(t, "discarded")


@tck_test
async def test_stale_fence_is_refused_on_snoozed(t: Tck) -> None:
    await _stale_refused(t, "snoozed")


@tck_test
async def test_stale_fence_is_refused_on_cancelled(t: Tck) -> None:
    await _stale_refused(t, "cancelled")


@tck_test
async def test_stale_fence_is_refused_within_a_batch_and_the_rest_applies(t: Tck) -> None:
    stale = await _executing(t, queue="one")
    taken = await take_over(t, stale)
    fresh = await claim_only(t.store, await insert_one(t.store, new_job(queue="two")), "two")
    result = await t.store.job_settle(
        [settlement(stale, "completed"), settlement(fresh, "retryable", delay=1, error="x")]
    )
    assert (result.applied, result.refused) == ((fresh.id,), (stale.id,))
    stale_record = await get(t, stale.id)
    assert (stale_record.state, stale_record.fence) == ("executing", taken.fence)
    assert (await get(t, fresh.id)).state == "retryable"


@tck_test
async def test_settling_twice_is_refused_and_the_first_outcome_stands(t: Tck) -> None:
    claimed = await _executing(t)
    await settle(t.store, claimed, "completed")
    first = await get(t, claimed.id)
    t.clock.advance(seconds=5)
    outcomes: tuple[Outcome, ...] = ("completed", "retryable", "discarded", "snoozed", "cancelled")
    for outcome in outcomes:
        again = await t.store.job_settle([settlement(claimed, outcome, error="again")])
        assert (again.applied, again.refused) == ((), (claimed.id,))
    assert await get(t, claimed.id) == first


@tck_test
async def test_settle_of_a_job_that_is_not_executing_is_refused(t: Tck) -> None:
    for state in ("available", "scheduled", "retryable", "discarded", "cancelled"):
        job_id = await arrange(t, state)
        before = await get(t, job_id)
        result = await t.store.job_settle(
            [Settle(id=job_id, fence=before.fence, outcome="completed")]
        )
        assert (result.applied, result.refused) == ((), (job_id,)), state
        assert await get(t, job_id) == before


@tck_test
async def test_settle_of_an_unknown_job_is_refused(t: Tck) -> None:
    result = await t.store.job_settle([Settle(id=UNKNOWN_ID, fence=1, outcome="completed")])
    assert (result.applied, result.refused) == ((), (UNKNOWN_ID,))


@tck_test
async def test_settle_refuses_a_batch_with_a_bad_settlement_and_applies_none_of_it(
    t: Tck,
) -> None:
    first, second = await insert(t.store, new_job(), new_job())
    claimed = {c.id: c for c in await claim(t.store)}
    before = [await get(t, job_id) for job_id in (first, second)]
    good = settlement(claimed[first], "completed")
    for bad in (
        Settle(id=second, fence=claimed[second].fence, outcome="retryable", delay_seconds=-1),
        Settle(id=second, fence=claimed[second].fence, outcome="vanished"),  # type: ignore[arg-type]
    ):
        with pytest.raises(JobRejected):
            await t.store.job_settle([good, bad])
    assert [await get(t, job_id) for job_id in (first, second)] == before
