"""Races across replicas: claims, unique keys, schedule ticks, settles and rescues.

Every replica is a separate handle on the same database, run concurrently with asyncio.gather;
whatever the interleaving, the store's guarantees must hold.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from ket.store.contract import JobStore, QueryableStore
from ket.store.types import ClaimedJob, JobId, Settle, TickClaim
from ket.tck.arrange import (
    LEASE,
    claim,
    insert,
    new_job,
    records,
    settlement,
)
from ket.tck.harness import EPOCH, Tck, tck_test

__all__ = [
    "test_concurrent_claimers_receive_every_job_exactly_once",
    "test_concurrent_inserts_of_one_unique_key_leave_one_active_row",
    "test_concurrent_rescuers_rescue_every_expired_job_exactly_once",
    "test_concurrent_settles_by_old_and_new_fence_holders_apply_only_the_current_fence",
    "test_replicas_racing_one_schedule_tick_fire_it_exactly_once",
    "test_settles_racing_a_rescue_and_reclaim_never_overwrite_the_new_holder",
]


async def _replicas(t: Tck, count: int) -> list[JobStore]:
    """The store under test and `count - 1` more handles on its database."""
    return [t.store, *[await t.replica() for _ in range(count - 1)]]


@tck_test
async def test_concurrent_claimers_receive_every_job_exactly_once(t: Tck) -> None:
    job_ids = await insert(t.store, *[new_job(queue="race", payload={"n": n}) for n in range(600)])
    handles = await _replicas(t, 6)

    async def drain(handle: JobStore, worker: str) -> list[ClaimedJob]:
        taken: list[ClaimedJob] = []
        for _ in range(600):  # a bound, so that a store handing out jobs twice fails, not hangs
            batch = await claim(handle, "race", limit=10, worker_id=worker)
            assert len(batch) <= 10
            if not batch:
                return taken
            taken.extend(batch)
        raise AssertionError(f"{worker} claimed more than 600 batches from 600 jobs")

    per_replica = await asyncio.gather(
        *[drain(handle, f"replica-{n}") for n, handle in enumerate(handles)]
    )
    everything = [c.id for taken in per_replica for c in taken]
    duplicates = [job_id for job_id, n in Counter(everything).items() if n > 1]
    assert duplicates == []
    assert len(everything) == 600
    assert set(everything) == set(job_ids)
    assert all(c.fence == 1 and c.attempt == 1 for taken in per_replica for c in taken)
    if isinstance(t.store, QueryableStore):
        holder = {c.id: f"replica-{n}" for n, taken in enumerate(per_replica) for c in taken}
        rows = await records(t, queues=("race",))
        assert {r.id: r.worker_id for r in rows} == holder
        assert {r.state for r in rows} == {"executing"}


@tck_test
async def test_concurrent_inserts_of_one_unique_key_leave_one_active_row(t: Tck) -> None:
    handles = await _replicas(t, 5)
    tasks = [
        handles[n % len(handles)].job_insert(
            [new_job("kit.unique", unique_key="race", payload={"n": n})]
        )
        for n in range(20)
    ]
    results = [r for batch in await asyncio.gather(*tasks) for r in batch]
    assert len(results) == 20
    assert len({r.id for r in results}) == 1, results
    assert [r.coalesced for r in results].count(False) == 1
    claimed = await claim(t.store, limit=100)
    assert [c.id for c in claimed] == [results[0].id]


@tck_test
async def test_replicas_racing_one_schedule_tick_fire_it_exactly_once(t: Tck) -> None:
    schedule_id = "sales.report@every 1h"
    install = TickClaim(schedule_id=schedule_id, fingerprint="fp", tick=EPOCH, expected=None)
    assert (await t.store.schedule_claim_tick(install)).won is True
    (expected,) = (await t.store.schedule_get([schedule_id])).values()
    tick = EPOCH + timedelta(hours=1)
    t.clock.advance(hours=1)
    handles = await _replicas(t, 3)
    claims = [
        handle.schedule_claim_tick(
            TickClaim(
                schedule_id=schedule_id,
                fingerprint="fp",
                tick=tick,
                expected=expected,
                job=new_job("sales.report", tick=tick, ticks_skipped=0, payload={"by": n}),
            )
        )
        for n, handle in enumerate(handles)
    ]
    results = await asyncio.gather(*claims)
    winners = [r for r in results if r.won]
    assert len(winners) == 1, results
    assert winners[0].job is not None
    assert [r.job for r in results if not r.won] == [None, None]
    claimed = await claim(t.store, limit=100)
    assert [c.id for c in claimed] == [winners[0].job.id]
    assert (await t.store.schedule_get([schedule_id]))[schedule_id].last_tick == tick
    if isinstance(t.store, QueryableStore):
        fires = await t.store.schedule_fires(schedule_id)
        assert [(f.tick, f.job_id) for f in fires] == [(tick, winners[0].job.id)]


@tck_test
async def test_concurrent_settles_by_old_and_new_fence_holders_apply_only_the_current_fence(
    t: Tck,
) -> None:
    old_holder, new_holder = await _replicas(t, 2)
    job_ids = await insert(t.store, *[new_job(queue="race") for _ in range(20)])
    old = await claim(old_holder, "race", limit=20, lease=10)
    t.clock.advance(seconds=11)
    assert len(await t.store.job_rescue()) == 20
    new = await claim(new_holder, "race", limit=20, worker_id="worker-2", lease=LEASE)
    assert sorted(c.id for c in new) == sorted(job_ids)
    by_id = {c.id: c for c in new}

    async def applied(handle: JobStore, s: Settle) -> bool:
        return s.id in (await handle.job_settle([s])).applied

    # each job settled at once by its stale holder and by its current one
    races = [
        (
            applied(old_holder, settlement(c, "completed")),
            applied(new_holder, settlement(by_id[c.id], "retryable", delay=60, error="current")),
        )
        for c in old
    ]
    results = await asyncio.gather(*[settle for race in races for settle in race])
    assert results[0::2] == [False] * 20, "a stale fence was applied"
    assert results[1::2] == [True] * 20, "the current fence was refused"
    if isinstance(t.store, QueryableStore):
        for record in await records(t, queues=("race",)):
            assert (record.state, record.fence) == ("retryable", 2), record
            assert [e.error for e in record.errors][-1] == "current"


@tck_test
async def test_settles_racing_a_rescue_and_reclaim_never_overwrite_the_new_holder(t: Tck) -> None:
    old_holder, new_holder = await _replicas(t, 2)
    job_ids = await insert(t.store, *[new_job(queue="race") for _ in range(20)])
    old = await claim(old_holder, "race", limit=20, lease=10)
    t.clock.advance(seconds=11)  # every lease expired; the old holder settles anyway, late

    async def settle_late() -> set[JobId]:
        applied: set[JobId] = set()
        for c in old:
            applied.update((await old_holder.job_settle([settlement(c, "completed")])).applied)
        return applied

    async def take_over() -> list[ClaimedJob]:
        await new_holder.job_rescue()
        return await claim(new_holder, "race", limit=20, worker_id="worker-2")

    settled, taken = await asyncio.gather(settle_late(), take_over())
    # a claim skips a row that a stale settle is waiting to lock (SKIP LOCKED): such a job is
    # not lost, the next claim takes it
    taken += await claim(new_holder, "race", limit=20, worker_id="worker-2")
    taken_ids = {c.id for c in taken}
    assert settled & taken_ids == set(), "a job was both settled late and claimed again"
    # the new holder's outcome is applied for every job it claimed
    result = await new_holder.job_settle([settlement(c, "completed") for c in taken])
    assert (set(result.applied), result.refused) == (taken_ids, ())
    assert settled | taken_ids == set(job_ids)
    if isinstance(t.store, QueryableStore):
        rows = {r.id: r for r in await records(t, queues=("race",))}
        assert {r.state for r in rows.values()} <= {"completed", "retryable"}
        assert {i for i, r in rows.items() if r.state == "completed"} == settled | taken_ids


@tck_test
async def test_concurrent_rescuers_rescue_every_expired_job_exactly_once(t: Tck) -> None:
    job_ids = await insert(t.store, *[new_job(queue="race") for _ in range(30)])
    await claim(t.store, "race", limit=30, lease=10)
    t.clock.advance(seconds=11)
    handles = await _replicas(t, 3)
    rescued = await asyncio.gather(*[handle.job_rescue(limit=7) for handle in handles])
    more = await t.store.job_rescue()
    everything = [r.id for batch in [*rescued, more] for r in batch]
    assert sorted(everything) == sorted(job_ids)
    if isinstance(t.store, QueryableStore):
        for record in await records(t, queues=("race",)):
            assert (record.state, len(record.errors)) == ("retryable", 1), record
