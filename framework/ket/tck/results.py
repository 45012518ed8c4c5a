"""Results and progress: what a completion carries is kept with its job, fenced as the completion
is, shown by job_get only, and gone with the job; what a heartbeat's lease carries is the job's
progress, written only while the lease is held."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ket.errors import JobRejected
from ket.store.types import ClaimedJob, Heartbeat, Lease, Prune, Settle
from ket.tck.arrange import claim_only as claim_one
from ket.tck.arrange import (
    get,
    insert_one,
    new_job,
    queryable,
    records,
    settle,
    settlement,
    take_over,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_completion_keeps_its_result_and_job_get_shows_it",
    "test_a_completion_without_a_result_keeps_none",
    "test_a_heartbeat_writes_the_progress_its_leases_carry",
    "test_a_lease_no_longer_held_writes_no_progress",
    "test_a_listing_leaves_results_out",
    "test_a_progress_must_be_the_json_text_of_a_small_object",
    "test_a_result_comes_with_a_completion_only",
    "test_a_result_must_be_the_json_text_of_an_object_of_bounded_size",
    "test_a_stale_completion_keeps_no_result",
    "test_results_are_pruned_with_their_jobs",
    "test_results_in_a_batch_are_kept_for_the_completions_applied_only",
]

MAX_RESULT_BYTES = 65_536  # the contract's bound on a result's JSON text (ket.limits)
RESULT = '{"charged":12.5,"receipt":"r-1","lines":[1,2]}'


async def _executing(t: Tck) -> ClaimedJob:
    job_id = await insert_one(t.store, new_job())
    return await claim_one(t.store, job_id)


def _completed(job: ClaimedJob, result: str | None = RESULT) -> Settle:
    return replace(settlement(job, "completed"), result=result)


@tck_test
async def test_a_completion_keeps_its_result_and_job_get_shows_it(t: Tck) -> None:
    claimed = await _executing(t)
    applied = await t.store.job_settle([_completed(claimed)])
    assert applied.applied == (claimed.id,)
    record = await get(t, claimed.id)
    assert record.state == "completed"
    assert record.result == {"charged": 12.5, "receipt": "r-1", "lines": [1, 2]}


@tck_test
async def test_a_completion_without_a_result_keeps_none(t: Tck) -> None:
    claimed = await _executing(t)
    await settle(t.store, claimed, "completed")
    assert (await get(t, claimed.id)).result is None


@tck_test
async def test_a_listing_leaves_results_out(t: Tck) -> None:
    claimed = await _executing(t)
    await t.store.job_settle([_completed(claimed)])
    [listed] = await records(t)
    assert (listed.id, listed.state, listed.result) == (claimed.id, "completed", None)


@tck_test
async def test_a_stale_completion_keeps_no_result(t: Tck) -> None:
    claimed = await _executing(t)
    again = await take_over(t, claimed)
    refused = await t.store.job_settle([_completed(claimed, '{"from":"the old attempt"}')])
    assert refused.refused == (claimed.id,)
    await t.store.job_settle([_completed(again, '{"from":"the new attempt"}')])
    assert (await get(t, claimed.id)).result == {"from": "the new attempt"}


@tck_test
async def test_results_in_a_batch_are_kept_for_the_completions_applied_only(t: Tck) -> None:
    first, second = await _executing(t), await _executing(t)
    stale = replace(_completed(second, '{"n":2}'), fence=second.fence - 1)
    result = await t.store.job_settle([_completed(first, '{"n":1}'), stale])
    assert (result.applied, result.refused) == ((first.id,), (second.id,))
    assert (await get(t, first.id)).result == {"n": 1}
    record = await get(t, second.id)
    assert (record.state, record.result) == ("executing", None)


@tck_test
async def test_a_result_comes_with_a_completion_only(t: Tck) -> None:
    claimed = await _executing(t)
    retry = replace(settlement(claimed, "retryable", error="boom"), result=RESULT)
    with pytest.raises(JobRejected, match="a result comes with a completion, not 'retryable'"):
        await t.store.job_settle([retry])
    assert (await get(t, claimed.id)).state == "executing"  # nothing written


@tck_test
async def test_a_result_must_be_the_json_text_of_an_object_of_bounded_size(t: Tck) -> None:
    claimed = await _executing(t)
    for bad in ("[1, 2]", "not json", '"text"'):
        with pytest.raises(JobRejected, match=r"result is not (the )?JSON text"):
            await t.store.job_settle([_completed(claimed, bad)])
    large = '{"blob":"' + "x" * MAX_RESULT_BYTES + '"}'
    with pytest.raises(JobRejected, match=f"over the limit of {MAX_RESULT_BYTES} bytes"):
        await t.store.job_settle([_completed(claimed, large)])
    record = await get(t, claimed.id)
    assert (record.state, record.result) == ("executing", None)


@tck_test
async def test_results_are_pruned_with_their_jobs(t: Tck) -> None:
    claimed = await _executing(t)
    await t.store.job_settle([_completed(claimed)])
    t.clock.advance(seconds=3_600)
    pruned = await t.store.job_prune(Prune(older_than_seconds=60, states=("completed",)))
    assert pruned == 1
    assert await queryable(t).job_get(claimed.id) is None
    # a job of the same id cannot come back, but the table holds nothing of it either: a
    # completion of a new job keeps its own result
    again = await _executing(t)
    await t.store.job_settle([_completed(again, '{"n":3}')])
    assert (await get(t, again.id)).result == {"n": 3}


# -- progress -----------------------------------------------------------------------------


@tck_test
async def test_a_heartbeat_writes_the_progress_its_leases_carry(t: Tck) -> None:
    claimed = await _executing(t)
    report = '{"fraction":0.4,"note":"charging cards"}'
    lease = Lease(id=claimed.id, fence=claimed.fence, progress=report)
    beat = await t.store.job_heartbeat(Heartbeat(leases=[lease], lease_seconds=30))
    assert beat.extended == (claimed.id,)
    assert (await get(t, claimed.id)).progress == {"fraction": 0.4, "note": "charging cards"}
    # a heartbeat without a report leaves the last one; a completion keeps it
    plain = Lease(id=claimed.id, fence=claimed.fence)
    await t.store.job_heartbeat(Heartbeat(leases=[plain], lease_seconds=30))
    await settle(t.store, claimed, "completed")
    record = await get(t, claimed.id)
    assert (record.state, record.progress) == (
        "completed",
        {"fraction": 0.4, "note": "charging cards"},
    )


@tck_test
async def test_a_lease_no_longer_held_writes_no_progress(t: Tck) -> None:
    claimed = await _executing(t)
    again = await take_over(t, claimed)
    stale = Lease(id=claimed.id, fence=claimed.fence, progress='{"fraction":0.9,"note":null}')
    beat = await t.store.job_heartbeat(Heartbeat(leases=[stale], lease_seconds=30))
    assert beat.lost == (claimed.id,)
    assert (await get(t, again.id)).progress is None


@tck_test
async def test_a_progress_must_be_the_json_text_of_a_small_object(t: Tck) -> None:
    claimed = await _executing(t)
    for bad in ("0.4", '{"note":"' + "x" * 2_000 + '"}'):
        lease = Lease(id=claimed.id, fence=claimed.fence, progress=bad)
        with pytest.raises(JobRejected, match="progress"):
            await t.store.job_heartbeat(Heartbeat(leases=[lease], lease_seconds=30))
    assert (await get(t, claimed.id)).progress is None
