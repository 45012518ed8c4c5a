"""Operator commands: cancel (at once, or by request to a running worker) and retry."""

from __future__ import annotations

from ket.store.types import Heartbeat, Inserted, JobId, JobState, Lease, StateChange
from ket.tck.arrange import (
    UNKNOWN_ID,
    arrange,
    claim,
    claim_only,
    fresh_queue,
    get,
    ids,
    insert_one,
    new_job,
    settle,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_cancel_available_job_cancels_it_at_once",
    "test_cancel_executing_job_requests_cancel_and_the_worker_settles_it_cancelled",
    "test_cancel_of_a_terminal_job_leaves_it_alone_with_a_reason",
    "test_cancel_of_an_unknown_job_reports_no_previous_state",
    "test_cancel_retryable_job_cancels_it_at_once",
    "test_cancel_scheduled_job_cancels_it_at_once",
    "test_cancelled_executing_job_releases_its_unique_key",
    "test_retried_job_holds_its_unique_key_again",
    "test_retry_discarded_job_makes_it_available_now_keeping_its_history",
    "test_retry_exhausted_job_grants_one_more_attempt",
    "test_retry_is_refused_when_an_active_job_holds_the_unique_key",
    "test_retry_of_an_unknown_job_reports_no_previous_state",
    "test_retry_refuses_available_scheduled_executing_completed_and_cancelled_jobs",
    "test_retry_retryable_job_makes_it_available_now_keeping_its_history",
]


# -- cancel ---------------------------------------------------------------------------------------


async def _cancels_at_once(t: Tck, state: JobState) -> None:
    queue = fresh_queue(state)
    job_id = await arrange(t, state, queue=queue)
    before = await get(t, job_id)
    t.clock.advance(seconds=7)
    change = await t.store.job_cancel(job_id)
    assert (change.id, change.previous, change.state, change.changed) == (
        job_id,
        state,
        "cancelled",
        True,
    )
    record = await get(t, job_id)
    assert (record.state, record.finished_at) == ("cancelled", t.clock.now())
    assert (record.attempt, record.errors) == (before.attempt, before.errors)
    t.clock.advance(days=1)  # long past any due time: still never claimed
    assert await claim(t.store, queue) == []


@tck_test
async def test_cancel_available_job_cancels_it_at_once(t: Tck) -> None:
    await _cancels_at_once(t, "available")


@tck_test
async def test_cancel_scheduled_job_cancels_it_at_once(t: Tck) -> None:
    await _cancels_at_once(t, "scheduled")


@tck_test
async def test_cancel_retryable_job_cancels_it_at_once(t: Tck) -> None:
    await _cancels_at_once(t, "retryable")


@tck_test
async def test_cancel_executing_job_requests_cancel_and_the_worker_settles_it_cancelled(
    t: Tck,
) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    change = await t.store.job_cancel(job_id)
    assert (change.id, change.previous, change.state) == (job_id, "executing", "executing")
    record = await get(t, job_id)
    assert (record.state, record.cancel_requested) == ("executing", True)
    assert (record.fence, record.lease_until) == (claimed.fence, claimed.lease_until)
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=30)
    )
    assert beat.cancel_requested == (job_id,)
    t.clock.advance(seconds=2)
    await settle(t.store, claimed, "cancelled", error="aborted: cancelled")
    record = await get(t, job_id)
    assert (record.state, record.finished_at, record.lease_until) == (
        "cancelled",
        t.clock.now(),
        None,
    )


@tck_test
async def test_cancel_of_a_terminal_job_leaves_it_alone_with_a_reason(t: Tck) -> None:
    terminal: tuple[JobState, ...] = ("completed", "discarded", "cancelled")
    for state in terminal:
        job_id = await arrange(t, state)
        before = await get(t, job_id)
        t.clock.advance(seconds=1)
        change = await t.store.job_cancel(job_id)
        assert (change.id, change.previous, change.state, change.changed) == (
            job_id,
            state,
            state,
            False,
        )
        assert change.reason, f"cancelling a {state} job gives no reason"
        assert await get(t, job_id) == before


@tck_test
async def test_cancel_of_an_unknown_job_reports_no_previous_state(t: Tck) -> None:
    change = await t.store.job_cancel(UNKNOWN_ID)
    assert (change.id, change.previous, change.state, change.changed) == (
        UNKNOWN_ID,
        None,
        None,
        False,
    )


@tck_test
async def test_cancelled_executing_job_releases_its_unique_key(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job("kit.unique", unique_key="k-1"))
    claimed = await claim_only(t.store, job_id)
    await t.store.job_cancel(job_id)
    # cancel requested but still executing: the key is still held
    held = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert held == [Inserted(id=job_id, coalesced=True)]
    await settle(t.store, claimed, "cancelled")
    (fresh,) = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert (fresh.coalesced, fresh.id != job_id) == (False, True)


# -- operator retry -------------------------------------------------------------------------------


async def _retried(t: Tck, job_id: JobId, previous: JobState) -> None:
    before = await get(t, job_id)
    t.clock.advance(seconds=30)
    change = await t.store.job_retry(job_id)
    assert change == StateChange(
        id=job_id, previous=previous, state="available", changed=True, reason=change.reason
    )
    record = await get(t, job_id)
    assert (record.state, record.run_at, record.finished_at) == ("available", t.clock.now(), None)
    assert (record.attempt, record.errors) == (before.attempt, before.errors)
    assert (record.lease_until, record.cancel_requested) == (None, False)
    again = await claim_only(t.store, job_id, record.queue)
    assert (again.attempt, again.fence) == (before.attempt + 1, before.fence + 1)


@tck_test
async def test_retry_retryable_job_makes_it_available_now_keeping_its_history(t: Tck) -> None:
    job_id = await arrange(t, "retryable")
    await _retried(t, job_id, "retryable")
    assert (await get(t, job_id)).max_attempts == 20


@tck_test
async def test_retry_discarded_job_makes_it_available_now_keeping_its_history(t: Tck) -> None:
    job_id = await arrange(t, "discarded")
    assert [e.error for e in (await get(t, job_id)).errors] == ["gave up"]
    await _retried(t, job_id, "discarded")
    assert (await get(t, job_id)).max_attempts == 20


@tck_test
async def test_retry_exhausted_job_grants_one_more_attempt(t: Tck) -> None:
    job_id = await arrange(t, "discarded", max_attempts=1)
    record = await get(t, job_id)
    assert (record.attempt, record.max_attempts) == (1, 1)
    change = await t.store.job_retry(job_id)
    assert (change.previous, change.state, change.changed) == ("discarded", "available", True)
    assert (await get(t, job_id)).max_attempts == 2
    again = await claim_only(t.store, job_id, record.queue)
    assert (again.attempt, again.max_attempts) == (2, 2)


@tck_test
async def test_retry_refuses_available_scheduled_executing_completed_and_cancelled_jobs(
    t: Tck,
) -> None:
    refused: tuple[JobState, ...] = (
        "available",
        "scheduled",
        "executing",
        "completed",
        "cancelled",
    )
    for state in refused:
        job_id = await arrange(t, state)
        before = await get(t, job_id)
        change = await t.store.job_retry(job_id)
        assert (change.id, change.previous, change.state, change.changed) == (
            job_id,
            state,
            state,
            False,
        )
        assert change.reason, f"retrying a {state} job gives no reason"
        assert await get(t, job_id) == before


@tck_test
async def test_retry_of_an_unknown_job_reports_no_previous_state(t: Tck) -> None:
    change = await t.store.job_retry(UNKNOWN_ID)
    assert (change.id, change.previous, change.state, change.changed) == (
        UNKNOWN_ID,
        None,
        None,
        False,
    )


@tck_test
async def test_retry_is_refused_when_an_active_job_holds_the_unique_key(t: Tck) -> None:
    old = await arrange(t, "discarded", name="kit.unique", unique_key="k-1")
    holder = await insert_one(t.store, new_job("kit.unique", unique_key="k-1"))
    before = await get(t, old)
    change = await t.store.job_retry(old)
    assert (change.previous, change.state, change.changed) == ("discarded", "discarded", False)
    assert change.reason
    assert await get(t, old) == before
    assert sorted(await ids(t, names=("kit.unique",), states=("available",))) == [holder]


@tck_test
async def test_retried_job_holds_its_unique_key_again(t: Tck) -> None:
    old = await arrange(t, "discarded", name="kit.unique", unique_key="k-1")
    change = await t.store.job_retry(old)
    assert (change.state, change.changed) == ("available", True)
    again = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert again == [Inserted(id=old, coalesced=True)]
