"""Bulk operator commands (capability BulkStore): retry or cancel every job a filter matches,
a batch at a time, each job as the single-job command would change it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from ket.errors import JobRejected
from ket.store.contract import BulkStore
from ket.store.types import (
    BulkApplied,
    BulkBatch,
    Heartbeat,
    JobFilter,
    JobId,
    JobState,
    Lease,
    NewJob,
)
from ket.tck.arrange import (
    arrange,
    claim,
    claim_only,
    fresh_queue,
    get,
    insert,
    insert_one,
    new_job,
    records,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_bulk_acts_on_the_ids_named_only",
    "test_bulk_batches_go_on_from_the_last_id_until_nothing_matches",
    "test_bulk_cancel_cancels_pending_jobs_and_asks_running_ones_to_abort",
    "test_bulk_cancel_never_matches_a_running_job_whose_cancel_was_requested",
    "test_bulk_cancel_racing_a_claim_leaves_every_job_cancelled_or_asked_to_abort",
    "test_bulk_count_matches_exactly_the_filtered_jobs",
    "test_bulk_filters_by_tags_any_one_of_them",
    "test_bulk_refuses_a_bad_filter_naming_the_value",
    "test_bulk_retry_keeps_one_holder_per_unique_key",
    "test_bulk_retry_makes_retryable_and_discarded_jobs_available_keeping_history",
    "test_bulk_states_narrow_the_action_to_those_states",
]


def bulkable(t: Tck) -> BulkStore:
    """The store as a BulkStore, or the test is skipped visibly."""
    return t.require(BulkStore)  # type: ignore[type-abstract]


async def _apply_all(store: BulkStore, job_filter: JobFilter, limit: int) -> list[BulkApplied]:
    """Every batch until one matches nothing (at most 1,000: a loop that never ends fails)."""
    batches: list[BulkApplied] = []
    for _ in range(1_000):
        applied = await store.job_bulk_apply(BulkBatch(filter=job_filter, limit=limit))
        if applied.last_id is None:
            return batches
        batches.append(applied)
        job_filter = replace(job_filter, after_id=applied.last_id)
    raise AssertionError(f"bulk {job_filter.action} still matched jobs after 1,000 batches")


def _changed(batches: list[BulkApplied]) -> list[JobId]:
    return [change.id for batch in batches for change in batch.changed]


async def _one_of_each(t: Tck, queue: str) -> dict[JobState, JobId]:
    """A job in each state, all in `queue` (the executing one claimed under the kit's worker)."""
    jobs: dict[JobState, JobId] = {}
    first: tuple[JobState, ...] = ("retryable", "completed", "discarded", "cancelled")
    for state in first:
        jobs[state] = await arrange(t, state, queue=queue)
    jobs["executing"] = await insert_one(t.store, new_job(queue=queue))
    await claim_only(t.store, jobs["executing"], queue)
    last: tuple[JobState, ...] = ("scheduled", "available")  # nothing else is claimed after
    for state in last:
        jobs[state] = await arrange(t, state, queue=queue)
    return jobs


@tck_test
async def test_bulk_count_matches_exactly_the_filtered_jobs(t: Tck) -> None:
    store = bulkable(t)
    mail, sms = fresh_queue("mail"), fresh_queue("sms")
    old_mail = await arrange(t, "discarded", queue=mail, name="kit.a")
    old_sms = await arrange(t, "retryable", queue=sms, name="kit.b")
    t.clock.advance(hours=2)
    cutoff = t.clock.now()
    t.clock.advance(seconds=1)
    new_mail = await arrange(t, "discarded", queue=mail, name="kit.b")
    await arrange(t, "completed", queue=mail, name="kit.a")  # retry never takes it
    await arrange(t, "available", queue=mail, name="kit.a")

    async def counted(**fields: Any) -> tuple[int, list[JobId], JobId | None]:
        found = await store.job_bulk_count(JobFilter(action="retry", **fields))
        return found.count, [r.id for r in found.sample], found.last_id

    everything = [old_mail, old_sms, new_mail]
    assert await counted() == (3, everything, new_mail)
    assert await counted(queues=(mail,)) == (2, [old_mail, new_mail], new_mail)
    assert await counted(names=("kit.b",)) == (2, [old_sms, new_mail], new_mail)
    # several values of one filter: any of them
    assert await counted(queues=(mail, sms)) == (3, everything, new_mail)
    assert await counted(names=("kit.a", "kit.none")) == (1, [old_mail], old_mail)
    assert await counted(queues=(sms,), names=("kit.a", "kit.b")) == (1, [old_sms], old_sms)
    assert await counted(enqueued_before=cutoff) == (2, [old_mail, old_sms], old_sms)
    assert await counted(states=("discarded",)) == (2, [old_mail, new_mail], new_mail)
    assert await counted(queues=(sms,), states=("discarded",)) == (0, [], None)
    assert await counted(after_id=old_mail, through_id=old_sms) == (1, [old_sms], old_sms)
    sampled = await store.job_bulk_count(JobFilter(action="retry"), sample=1)
    assert (sampled.count, [r.id for r in sampled.sample]) == (3, [old_mail])
    (record,) = sampled.sample
    assert (record.name, record.state, record.queue) == ("kit.a", "discarded", mail)
    cancellable = await store.job_bulk_count(JobFilter(action="cancel", queues=(mail,)))
    assert cancellable.count == 1  # the available one: the rest have finished


@tck_test
async def test_bulk_filters_by_tags_any_one_of_them(t: Tck) -> None:
    store = bulkable(t)
    name = fresh_queue("tagged")  # a job name no other test uses
    both = await arrange(t, "discarded", name=name, tags=("billing", "eu"))
    billing = await arrange(t, "retryable", name=name, tags=("billing",))
    eu = await arrange(t, "discarded", name=name, tags=("eu",))
    untagged = await arrange(t, "discarded", name=name)
    retry = JobFilter(action="retry", names=(name,), tags=("billing",))
    assert (await store.job_bulk_count(retry)).count == 2
    either = JobFilter(action="retry", names=(name,), tags=("eu", "billing"))
    assert [r.id for r in (await store.job_bulk_count(either)).sample] == [both, billing, eu]
    assert _changed(await _apply_all(store, either, limit=1)) == [both, billing, eu]
    assert {(await get(t, job_id)).state for job_id in (both, billing, eu)} == {"available"}
    left = await store.job_bulk_count(JobFilter(action="retry", names=(name,)))
    assert [r.id for r in left.sample] == [untagged]


@tck_test
async def test_bulk_acts_on_the_ids_named_only(t: Tck) -> None:
    store = bulkable(t)
    name = fresh_queue("ticked")  # a job name no other test uses
    first, second, third = [await arrange(t, "discarded", name=name) for _ in range(3)]
    ticked = JobFilter(action="retry", names=(name,), ids=(third, first))
    counted = await store.job_bulk_count(ticked)
    assert (counted.count, [r.id for r in counted.sample]) == (2, [first, third])
    assert _changed(await _apply_all(store, ticked, limit=1)) == [first, third]
    assert (await get(t, second)).state == "discarded"  # not ticked: left as it was
    finished = await arrange(t, "completed", name=name)  # ticked, but no retry applies to it
    assert (await store.job_bulk_count(JobFilter(action="retry", ids=(finished,)))).count == 0


@tck_test
async def test_bulk_retry_makes_retryable_and_discarded_jobs_available_keeping_history(
    t: Tck,
) -> None:
    store = bulkable(t)
    queue = fresh_queue("retry")
    exhausted = await arrange(t, "discarded", queue=queue, max_attempts=1)
    jobs = await _one_of_each(t, queue)
    running = jobs["executing"]
    elsewhere = await arrange(t, "discarded")  # another queue
    before = {job_id: await get(t, job_id) for job_id in [*jobs.values(), exhausted]}
    t.clock.advance(seconds=30)
    batches = await _apply_all(store, JobFilter(action="retry", queues=(queue,)), limit=100)
    retried = [jobs["retryable"], jobs["discarded"], exhausted]
    assert sorted(_changed(batches)) == sorted(retried)
    assert [c.previous for b in batches for c in b.changed] == [
        "discarded",
        "retryable",
        "discarded",
    ]
    for job_id in retried:
        record, old = await get(t, job_id), before[job_id]
        assert (record.state, record.run_at, record.finished_at) == (
            "available",
            t.clock.now(),
            None,
        )
        assert (record.attempt, record.errors) == (old.attempt, old.errors)  # history kept
    assert (await get(t, exhausted)).max_attempts == 2  # one more attempt
    for job_id in (*[jobs[s] for s in ("available", "scheduled", "completed")], running):
        assert await get(t, job_id) == before[job_id]
    assert await get(t, jobs["cancelled"]) == before[jobs["cancelled"]]
    assert (await get(t, elsewhere)).state == "discarded"
    again = await claim(t.store, queue, limit=10)
    assert {job.id for job in again} >= set(retried)


@tck_test
async def test_bulk_cancel_cancels_pending_jobs_and_asks_running_ones_to_abort(t: Tck) -> None:
    store = bulkable(t)
    queue = fresh_queue("cancel")
    jobs = await _one_of_each(t, queue)
    running = jobs["executing"]
    fence = (await get(t, running)).fence
    terminal = {s: jobs[s] for s in ("completed", "discarded", "cancelled")}
    before = {state: await get(t, job_id) for state, job_id in terminal.items()}
    t.clock.advance(seconds=5)
    batches = await _apply_all(store, JobFilter(action="cancel", queues=(queue,)), limit=2)
    pending = [jobs[s] for s in ("available", "scheduled", "retryable")]
    assert sorted(_changed(batches)) == sorted([*pending, running])
    for job_id in pending:
        record = await get(t, job_id)
        assert (record.state, record.finished_at) == ("cancelled", t.clock.now())
    record = await get(t, running)
    assert (record.state, record.cancel_requested, record.fence) == (
        "executing",
        True,
        fence,
    )
    beat = await t.store.job_heartbeat(
        Heartbeat(leases=[Lease(id=running, fence=fence)], lease_seconds=30)
    )
    assert beat.cancel_requested == (running,)
    for state, job_id in terminal.items():
        assert await get(t, job_id) == before[state], f"a {state} job was touched"
    t.clock.advance(days=1)
    assert await claim(t.store, queue, limit=10) == []


@tck_test
async def test_bulk_cancel_never_matches_a_running_job_whose_cancel_was_requested(
    t: Tck,
) -> None:
    store = bulkable(t)
    queue = fresh_queue("running")
    running = await insert(t.store, *[new_job(queue=queue) for _ in range(3)])
    await claim(t.store, queue, limit=3)
    await t.store.job_cancel(running[0])  # asked once already, one at a time
    cancel = JobFilter(action="cancel", queues=(queue,))
    assert (await store.job_bulk_count(cancel)).count == 2
    first = await store.job_bulk_apply(BulkBatch(filter=cancel, limit=10))
    assert ([c.id for c in first.changed], first.skipped) == (running[1:], ())
    assert (await store.job_bulk_count(cancel)).count == 0
    second = await store.job_bulk_apply(BulkBatch(filter=cancel, limit=10))
    assert second == BulkApplied(changed=(), skipped=(), last_id=None)


@tck_test
async def test_bulk_batches_go_on_from_the_last_id_until_nothing_matches(t: Tck) -> None:
    store = bulkable(t)
    queue = fresh_queue("batches")
    job_ids = await insert(t.store, *[new_job(queue=queue) for _ in range(25)])
    batches = await _apply_all(store, JobFilter(action="cancel", queues=(queue,)), limit=10)
    assert [[c.id for c in b.changed] for b in batches] == [
        job_ids[0:10],
        job_ids[10:20],
        job_ids[20:25],
    ]
    assert [b.last_id for b in batches] == [job_ids[9], job_ids[19], job_ids[24]]
    assert {r.state for r in await records(t, queues=(queue,))} == {"cancelled"}
    # a bound: the batch stops at through_id whatever else matches
    more = await insert(t.store, *[new_job(queue=queue) for _ in range(3)])
    bounded = JobFilter(action="cancel", queues=(queue,), through_id=more[1])
    assert _changed(await _apply_all(store, bounded, limit=10)) == more[:2]
    assert (await get(t, more[2])).state == "available"


@tck_test
async def test_bulk_states_narrow_the_action_to_those_states(t: Tck) -> None:
    store = bulkable(t)
    queue = fresh_queue("narrow")
    jobs = await _one_of_each(t, queue)
    retried = await _apply_all(
        store, JobFilter(action="retry", queues=(queue,), states=("discarded",)), limit=10
    )
    assert _changed(retried) == [jobs["discarded"]]
    assert (await get(t, jobs["executing"])).cancel_requested is False
    assert (await get(t, jobs["retryable"])).state == "retryable"
    cancelled = await _apply_all(
        store,
        JobFilter(action="cancel", queues=(queue,), states=("scheduled", "retryable")),
        limit=10,
    )
    assert sorted(_changed(cancelled)) == sorted([jobs["scheduled"], jobs["retryable"]])
    assert (await get(t, jobs["available"])).state == "available"
    assert (await get(t, jobs["executing"])).cancel_requested is False


@tck_test
async def test_bulk_retry_keeps_one_holder_per_unique_key(t: Tck) -> None:
    store = bulkable(t)
    queue = fresh_queue("unique")
    first = await arrange(t, "discarded", queue=queue, name="kit.u", unique_key="k-1")
    second = await arrange(t, "discarded", queue=queue, name="kit.u", unique_key="k-1")
    held = await arrange(t, "discarded", queue=queue, name="kit.u", unique_key="k-2")
    holder = await insert_one(t.store, new_job("kit.u", unique_key="k-2"))
    (batch,) = await _apply_all(store, JobFilter(action="retry", queues=(queue,)), limit=10)
    assert [c.id for c in batch.changed] == [first]
    assert [c.id for c in batch.skipped] == [second, held]
    assert all(c.reason and c.state == "discarded" for c in batch.skipped), batch.skipped
    assert f"active job {first}" in batch.skipped[0].reason
    assert f"active job {holder}" in batch.skipped[1].reason
    assert (await get(t, second)).state == "discarded"


@tck_test
async def test_bulk_cancel_racing_a_claim_leaves_every_job_cancelled_or_asked_to_abort(
    t: Tck,
) -> None:
    """Each job ends as if the claim and the cancel had happened one after the other: never
    claimed and cancelled, or claimed and then asked to abort; never both lost."""
    store = bulkable(t)
    worker = await t.replica()
    queue = fresh_queue("race")
    job_ids = await insert(t.store, *[NewJob(name="kit.job", queue=queue) for _ in range(200)])

    async def claim_all() -> int:
        taken = 0
        while len(claimed := await claim(worker, queue, limit=7)) > 0:
            taken += len(claimed)
            await asyncio.sleep(0)
        return taken

    cancelling = _apply_all(store, JobFilter(action="cancel", queues=(queue,)), limit=9)
    taken, batches = await asyncio.gather(claim_all(), cancelling)
    assert sorted(_changed(batches)) == job_ids  # each job changed once
    ends = {}
    for record in await records(t, queues=(queue,)):
        ends[record.id] = (record.state, record.attempt, record.cancel_requested)
    assert set(ends.values()) <= {("cancelled", 0, False), ("executing", 1, True)}, ends
    assert sum(1 for state, _, _ in ends.values() if state == "executing") == taken


@tck_test
async def test_bulk_refuses_a_bad_filter_naming_the_value(t: Tck) -> None:
    store = bulkable(t)
    naive = t.clock.now().replace(tzinfo=None)
    bad: list[tuple[Any, str]] = [
        (JobFilter(action="retry", states=("completed",)), "'completed'"),
        (JobFilter(action="cancel", states=("cancelled",)), "'cancelled'"),
        (JobFilter(action="delete"), "'delete'"),  # type: ignore[arg-type]
        (JobFilter(action="cancel", queues=("",)), "''"),
        (JobFilter(action="cancel", names=("a\x00b",)), "'a\\x00b'"),
        (JobFilter(action="cancel", queues="mail"), "'mail'"),  # type: ignore[arg-type]
        (JobFilter(action="retry", enqueued_before=naive), repr(naive)),
        (JobFilter(action="retry", after_id=-1), "-1"),
        (JobFilter(action="retry", tags=("",)), "''"),
        (JobFilter(action="retry", tags="billing"), "'billing'"),  # type: ignore[arg-type]
        (JobFilter(action="retry", ids=("7",)), "'7'"),  # type: ignore[arg-type]
        (JobFilter(action="retry", ids=7), "7"),  # type: ignore[arg-type]
    ]
    for job_filter, named in bad:
        with pytest.raises(JobRejected) as refused:
            await store.job_bulk_count(job_filter)
        assert named in str(refused.value), (job_filter, str(refused.value))
        with pytest.raises(JobRejected):
            await store.job_bulk_apply(BulkBatch(filter=job_filter))
    with pytest.raises(JobRejected, match=r"bulk batch limit .* got 0"):
        await store.job_bulk_apply(BulkBatch(filter=JobFilter(action="cancel"), limit=0))
