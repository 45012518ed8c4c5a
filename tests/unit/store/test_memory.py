"""The memory store's own hard parts: its indexes, claim order, fences, rollback, wake-ups.

The conformance kit (tests/tck) checks the contract; these tests pin what the kit cannot see
from outside: the unique index after every transition, the ready queues under a clock set back,
and wake-ups crossing event loops and threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest

from ket.errors import JobRejected, StoreError
from ket.store import (
    ClaimedJob,
    ErrorInfo,
    Heartbeat,
    JobClaim,
    JobId,
    JobQuery,
    JobStore,
    Lease,
    ManualClock,
    NewJob,
    Prune,
    PushStore,
    QueryableStore,
    ScheduleState,
    Settle,
    TickClaim,
    TransactionalStore,
)
from ket.store.memory import MemoryDatabase, MemoryStore
from ket.store.types import Outcome

START = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapper() -> T:
        return await main()

    return asyncio.run(wrapper())


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def store(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock=clock)


def job(name: str = "app.job", **fields: object) -> NewJob:
    return NewJob(name=name, **fields)  # type: ignore[arg-type]


async def insert(store: MemoryStore, *jobs: NewJob) -> list[JobId]:
    return [r.id for r in await store.job_insert(list(jobs))]


async def claim(
    store: MemoryStore, queue: str = "default", limit: int = 100, worker: str = "w1"
) -> list[ClaimedJob]:
    return await store.job_claim(
        JobClaim(queue=queue, limit=limit, worker_id=worker, lease_seconds=30)
    )


async def settle(
    store: MemoryStore, claimed: ClaimedJob, outcome: Outcome, delay: float = 0
) -> None:
    result = await store.job_settle(
        [Settle(id=claimed.id, fence=claimed.fence, outcome=outcome, delay_seconds=delay)]
    )
    assert result.applied == (claimed.id,)


async def state(store: MemoryStore, job_id: JobId) -> str | None:
    record = await store.job_get(job_id)
    return None if record is None else record.state


async def coalesces(store: MemoryStore, name: str = "app.job", key: str = "k") -> bool:
    """Whether inserting (name, key) now joins an active job; a new row is cancelled again."""
    [result] = await store.job_insert([job(name, unique_key=key)])
    if not result.coalesced:
        await store.job_cancel(result.id)
    return result.coalesced


# -- the handle ---------------------------------------------------------------------------


def test_memory_store_implements_the_contract_and_every_capability() -> None:
    store = MemoryStore()
    for protocol in (JobStore, PushStore, QueryableStore, TransactionalStore):
        assert isinstance(store, protocol)


def test_without_a_clock_now_is_this_machines_utc_time() -> None:
    before = datetime.now(UTC)
    now = run(MemoryStore().now)
    assert before <= now <= datetime.now(UTC)
    assert now.utcoffset() == timedelta(0)


def test_closed_handle_refuses_every_call_but_its_database_lives_on(clock: ManualClock) -> None:
    async def main() -> None:
        database = MemoryDatabase()
        closing, other = MemoryStore(database, clock=clock), MemoryStore(database, clock=clock)
        [job_id] = await insert(closing, job())
        await closing.close()
        await closing.close()  # closing twice is harmless
        calls: list[Callable[[], Awaitable[object]]] = [
            lambda: closing.job_insert([job()]),
            lambda: claim(closing),
            lambda: closing.job_get(job_id),
            closing.now,
            lambda: closing.wait_for_jobs(["default"], 0),
            lambda: closing.transaction().__aenter__(),
        ]
        for call in calls:
            with pytest.raises(StoreError, match="store is closed"):
                await call()
        assert await state(other, job_id) == "available"

    run(main)


def test_replicas_on_one_database_share_rows_and_ids(clock: ManualClock) -> None:
    async def main() -> None:
        database = MemoryDatabase()
        a, b = MemoryStore(database, clock=clock), MemoryStore(database, clock=clock)
        assert await insert(a, job()) == [1]
        assert await insert(b, job()) == [2]
        assert [c.id for c in await claim(b)] == [1, 2]
        assert await state(a, 1) == "executing"

    run(main)


def test_separate_databases_share_nothing(clock: ManualClock) -> None:
    async def main() -> None:
        a, b = MemoryStore(clock=clock), MemoryStore(clock=clock)
        await insert(a, job())
        assert await claim(b) == []
        assert await insert(b, job()) == [1]

    run(main)


def test_payloads_handed_out_are_copies(store: MemoryStore) -> None:
    async def main() -> None:
        payload = {"items": [1, 2]}
        [job_id] = await insert(store, job(payload=payload))
        payload["items"].append(3)
        record = await store.job_get(job_id)
        assert record is not None
        record.payload["items"].append(4)
        [claimed] = await claim(store)
        claimed.payload["items"].append(5)
        again = await store.job_get(job_id)
        assert again is not None and again.payload == {"items": [1, 2]}

    run(main)


def test_a_refused_batch_writes_nothing_and_uses_no_id(store: MemoryStore) -> None:
    async def main() -> None:
        with pytest.raises(JobRejected, match="priority"):
            await store.job_insert([job(unique_key="k"), job("app.bad", priority=5_000)])
        assert await store.job_list(JobQuery()) == []
        assert await insert(store, job(unique_key="k")) == [1]

    run(main)


# -- the unique index ----------------------------------------------------------------------


def test_unique_key_is_held_through_every_active_state_and_freed_by_each_terminal(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        for terminal in ("completed", "discarded", "cancelled"):
            [job_id] = await insert(store, job(unique_key="k", run_at=START + timedelta(hours=1)))
            assert await coalesces(store)  # scheduled
            clock.advance(hours=1)
            [claimed] = await claim(store)
            assert await coalesces(store)  # executing
            await settle(store, claimed, "retryable", delay=60)
            assert await coalesces(store)  # retryable
            clock.advance(minutes=1)
            [claimed] = await claim(store)
            await settle(store, claimed, "snoozed", delay=0)
            assert await state(store, job_id) == "available"
            assert await coalesces(store)  # available after a snooze
            [claimed] = await claim(store)
            await settle(store, claimed, terminal)
            assert await state(store, job_id) == terminal
            assert not await coalesces(store)

    run(main)


def test_unique_key_is_freed_by_cancelling_runnable_work_and_kept_by_a_cancel_request(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        [job_id] = await insert(store, job(unique_key="k"))
        await store.job_cancel(job_id)
        [running] = await insert(store, job(unique_key="k"))
        await claim(store)
        change = await store.job_cancel(running)
        assert (change.previous, change.state, change.changed) == ("executing", "executing", True)
        assert await coalesces(store)

    run(main)


def test_rescue_keeps_the_key_when_retryable_and_frees_it_when_discarded(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        [job_id] = await insert(store, job(unique_key="k", max_attempts=2))
        for expected, held in (("retryable", True), ("discarded", False)):
            await claim(store)
            clock.advance(seconds=31)
            [rescued] = await store.job_rescue()
            assert (rescued.id, rescued.state) == (job_id, expected)
            assert await coalesces(store) is held

    run(main)


def test_operator_retry_takes_the_key_back_or_is_refused_when_another_job_holds_it(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        [first] = await insert(store, job(unique_key="k", max_attempts=1))
        [claimed] = await claim(store)
        await settle(store, claimed, "discarded")
        [second] = await insert(store, job(unique_key="k"))
        refused = await store.job_retry(first)
        assert (refused.changed, refused.state) == (False, "discarded")
        assert str(second) in refused.reason
        await store.job_cancel(second)
        retried = await store.job_retry(first)
        assert (retried.previous, retried.state, retried.changed) == (
            "discarded",
            "available",
            True,
        )
        assert await coalesces(store)
        record = await store.job_get(first)
        assert record is not None
        assert (record.attempt, record.max_attempts, record.finished_at) == (1, 2, None)

    run(main)


def test_pruning_a_finished_job_leaves_the_active_holder_of_its_key(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        [old] = await insert(store, job(unique_key="k"))
        await store.job_cancel(old)
        [active] = await insert(store, job(unique_key="k"))
        clock.advance(days=1)
        assert await store.job_prune(Prune(older_than_seconds=60)) == 1
        assert await store.job_get(old) is None
        [again] = await store.job_insert([job(unique_key="k")])
        assert (again.id, again.coalesced) == (active, True)

    run(main)


# -- claim order and the ready queues -------------------------------------------------------


def test_claim_orders_by_priority_then_run_at_then_id(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        past = START - timedelta(minutes=5)
        ids = await insert(
            store,
            job(priority=5),  # 1
            job(priority=-5),  # 2
            job(priority=5, run_at=past),  # 3
            job(priority=0),  # 4
            job(priority=0),  # 5
            job(priority=-5, run_at=START + timedelta(seconds=1)),  # 6: not yet due
        )
        assert ids == [1, 2, 3, 4, 5, 6]
        assert [c.id for c in await claim(store, limit=2)] == [2, 4]
        clock.advance(seconds=1)
        assert [c.id for c in await claim(store)] == [6, 5, 3, 1]

    run(main)


def test_claim_order_holds_for_work_that_came_back(store: MemoryStore, clock: ManualClock) -> None:
    async def main() -> None:
        await insert(store, job(priority=1), job(priority=2), job(priority=3))
        claimed = await claim(store)
        await settle(store, claimed[2], "retryable")  # 3 back first, run_at = now
        await settle(store, claimed[0], "snoozed")  # 1 back second, same run_at
        clock.advance(seconds=1)
        await insert(store, job(priority=2))  # 4
        assert [c.id for c in await claim(store)] == [1, 4, 3]

    run(main)


def test_a_clock_set_back_makes_due_work_wait_again(store: MemoryStore, clock: ManualClock) -> None:
    async def main() -> None:
        await insert(store, job(run_at=START + timedelta(minutes=1)), job(priority=-1))
        clock.advance(minutes=1)
        assert [c.id for c in await claim(store, limit=1)] == [2]  # 1 is due now, but later
        clock.set(START)
        assert await claim(store) == []
        clock.advance(minutes=1)
        assert [c.id for c in await claim(store)] == [1]

    run(main)


def test_cancelled_and_pruned_jobs_are_never_claimed(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        await insert(store, job(), job(run_at=START + timedelta(minutes=1)), job())
        await store.job_cancel(1)
        await store.job_cancel(2)
        clock.advance(days=1)
        assert await store.job_prune(Prune(older_than_seconds=60)) == 2
        assert [c.id for c in await claim(store)] == [3]
        assert await claim(store) == []

    run(main)


def test_queues_are_claimed_separately(store: MemoryStore) -> None:
    async def main() -> None:
        await insert(store, job(queue="a"), job(queue="b"), job(queue="a"))
        assert [c.id for c in await claim(store, "a")] == [1, 3]
        assert [c.id for c in await claim(store, "b")] == [2]
        assert await claim(store, "missing") == []

    run(main)


def test_draining_a_large_backlog_hands_out_every_job_once_in_order(store: MemoryStore) -> None:
    async def main() -> None:
        jobs = [job(priority=(i * 7919) % 201 - 100) for i in range(10_000)]
        ids = await insert(store, *jobs)
        expected = sorted(ids, key=lambda i: (jobs[i - 1].priority, i))
        seen: list[JobId] = []
        while batch := await claim(store, limit=25):
            seen.extend(c.id for c in batch)
        assert seen == expected

    run(main)


def test_concurrent_claims_from_threads_never_share_a_job(clock: ManualClock) -> None:
    database = MemoryDatabase()
    run(lambda: insert(MemoryStore(database, clock=clock), *[job() for _ in range(2_000)]))

    def worker(n: int) -> list[JobId]:
        store = MemoryStore(database, clock=clock)
        got: list[JobId] = []

        async def drain() -> None:
            while batch := await claim(store, limit=3, worker=f"w{n}"):
                got.extend(c.id for c in batch)

        asyncio.run(drain())
        return got

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(worker, range(8)))
    claimed = [job_id for got in results for job_id in got]
    assert sorted(claimed) == list(range(1, 2_001))


# -- fences ---------------------------------------------------------------------------------


def test_a_stale_fence_is_refused_and_leaves_the_new_attempt_untouched(
    store: MemoryStore, clock: ManualClock
) -> None:
    async def main() -> None:
        await insert(store, job())
        [old] = await claim(store, worker="w1")
        clock.advance(seconds=31)
        await store.job_rescue()
        [new] = await claim(store, worker="w2")
        assert new.fence == old.fence + 1
        before = await store.job_get(new.id)
        result = await store.job_settle([Settle(id=old.id, fence=old.fence, outcome="completed")])
        assert (result.applied, result.refused) == ((), (old.id,))
        beat = await store.job_heartbeat(
            Heartbeat(leases=[Lease(id=old.id, fence=old.fence)], lease_seconds=30)
        )
        assert (beat.extended, beat.lost) == ((), (old.id,))
        assert await store.job_get(new.id) == before

    run(main)


def test_one_settlement_per_attempt_the_second_in_a_batch_is_refused(store: MemoryStore) -> None:
    async def main() -> None:
        await insert(store, job())
        [claimed] = await claim(store)
        done = Settle(id=claimed.id, fence=claimed.fence, outcome="completed")
        failed = Settle(
            id=claimed.id, fence=claimed.fence, outcome="discarded", error=ErrorInfo(error="x")
        )
        result = await store.job_settle([done, failed])
        assert (result.applied, result.refused) == ((claimed.id,), (claimed.id,))
        record = await store.job_get(claimed.id)
        assert record is not None and (record.state, record.errors) == ("completed", ())

    run(main)


def test_an_invalid_settlement_refuses_the_whole_batch(store: MemoryStore) -> None:
    async def main() -> None:
        await insert(store, job())
        [claimed] = await claim(store)
        good = Settle(id=claimed.id, fence=claimed.fence, outcome="completed")
        bad = Settle(id=claimed.id, fence=claimed.fence, outcome="retryable", delay_seconds=-1)
        with pytest.raises(JobRejected, match="delay_seconds"):
            await store.job_settle([good, bad])
        assert await state(store, claimed.id) == "executing"

    run(main)


# -- transactions ---------------------------------------------------------------------------


def test_a_transaction_that_raises_deletes_its_jobs_frees_their_keys_and_re_raises(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        [outside] = await insert(store, job(unique_key="held"))
        with pytest.raises(RuntimeError, match="business write failed"):
            async with store.transaction() as tx:
                assert tx.connection is None
                results = await tx.job_insert([job(unique_key="k"), job(unique_key="held")])
                assert [(r.id, r.coalesced) for r in results] == [(2, False), (outside, True)]
                assert await state(store, 2) == "available"  # no isolation
                raise RuntimeError("business write failed")
        assert await store.job_get(2) is None
        assert await state(store, outside) == "available"
        assert [r.id for r in await store.job_list(JobQuery())] == [outside]
        [again] = await store.job_insert([job(unique_key="k")])
        assert (again.id, again.coalesced) == (3, False)  # ids are not reused
        assert [c.id for c in await claim(store)] == [outside, 3]

    run(main)


def test_a_committed_transaction_keeps_its_jobs_and_closes(store: MemoryStore) -> None:
    async def main() -> None:
        async with store.transaction() as tx:
            await tx.job_insert([job()])
        assert await state(store, 1) == "available"
        with pytest.raises(StoreError, match="transaction is closed"):
            await tx.job_insert([job()])

    run(main)


def test_a_refused_insert_inside_a_transaction_rolls_back_the_earlier_ones(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        with pytest.raises(JobRejected):
            async with store.transaction() as tx:
                await tx.job_insert([job()])
                await tx.job_insert([job(max_attempts=0)])
        assert await store.job_list(JobQuery()) == []

    run(main)


def test_transaction_wakes_waiters_only_after_commit(store: MemoryStore) -> None:
    async def main() -> None:
        waiter = asyncio.create_task(store.wait_for_jobs(["default"], 5))
        await asyncio.sleep(0)
        async with store.transaction() as tx:
            await tx.job_insert([job()])
            await asyncio.sleep(0.05)
            assert not waiter.done()
        assert await asyncio.wait_for(waiter, 1) is True

    run(main)


def test_a_rolled_back_transaction_wakes_nobody(store: MemoryStore) -> None:
    async def main() -> None:
        waiter = asyncio.create_task(store.wait_for_jobs(["default"], 0.2))
        await asyncio.sleep(0)
        with pytest.raises(ValueError):
            async with store.transaction() as tx:
                await tx.job_insert([job()])
                raise ValueError
        assert await waiter is False

    run(main)


# -- wake-ups -------------------------------------------------------------------------------


def test_wait_times_out_false_and_ignores_other_queues_and_future_work(store: MemoryStore) -> None:
    async def main() -> None:
        waiter = asyncio.create_task(store.wait_for_jobs(["a"], 0.2))
        await asyncio.sleep(0)
        await insert(store, job(queue="b"), job(queue="a", run_at=START + timedelta(hours=1)))
        assert await waiter is False

    run(main)


def test_a_coalesced_insert_wakes_nobody(store: MemoryStore) -> None:
    async def main() -> None:
        await insert(store, job(unique_key="k"))
        waiter = asyncio.create_task(store.wait_for_jobs(["default"], 0.2))
        await asyncio.sleep(0)
        await insert(store, job(unique_key="k"))
        assert await waiter is False

    run(main)


def test_a_fired_schedule_tick_wakes_waiters(store: MemoryStore) -> None:
    async def main() -> None:
        installed = TickClaim(schedule_id="s", fingerprint="f", tick=START, expected=None)
        assert (await store.schedule_claim_tick(installed)).won
        waiter = asyncio.create_task(store.wait_for_jobs(["default"], 5))
        await asyncio.sleep(0)
        expected = ScheduleState(schedule_id="s", fingerprint="f", last_tick=START)
        fired = await store.schedule_claim_tick(
            TickClaim(schedule_id="s", fingerprint="f", tick=START, expected=expected, job=job())
        )
        assert fired.won and fired.job is not None
        assert await asyncio.wait_for(waiter, 1) is True

    run(main)


def test_an_insert_on_one_event_loop_wakes_a_waiter_on_another_thread(clock: ManualClock) -> None:
    database = MemoryDatabase()
    waiting = threading.Event()
    outcome: list[bool] = []

    def wait_in_thread() -> None:
        async def wait() -> None:
            store = MemoryStore(database, clock=clock)
            task = asyncio.create_task(store.wait_for_jobs(["default", "other"], 5))
            await asyncio.sleep(0)
            waiting.set()
            outcome.append(await task)

        asyncio.run(wait())

    thread = threading.Thread(target=wait_in_thread)
    thread.start()
    assert waiting.wait(5)
    run(lambda: insert(MemoryStore(database, clock=clock), job()))
    thread.join(5)
    assert outcome == [True]


def test_one_insert_wakes_every_waiter_on_that_queue(clock: ManualClock) -> None:
    async def main() -> None:
        database = MemoryDatabase()
        handles = [MemoryStore(database, clock=clock) for _ in range(3)]
        waiters = [asyncio.create_task(h.wait_for_jobs(["q"], 5)) for h in handles]
        await asyncio.sleep(0)
        await insert(handles[0], job(queue="q"))
        assert await asyncio.wait_for(asyncio.gather(*waiters), 1) == [True, True, True]

    run(main)


def test_a_wait_on_a_handle_closed_meanwhile_raises_instead_of_reporting(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        waiter = asyncio.create_task(store.wait_for_jobs(["default"], 0.1))
        await asyncio.sleep(0)
        await store.close()
        with pytest.raises(StoreError, match="store is closed"):
            await asyncio.wait_for(waiter, 1)

    run(main)


def test_wait_refuses_a_negative_timeout(store: MemoryStore) -> None:
    with pytest.raises(JobRejected, match=r"timeout must be .*, got -1"):
        run(lambda: store.wait_for_jobs(["default"], -1))


# -- schedules ------------------------------------------------------------------------------


def test_installing_a_schedule_with_a_job_is_refused_and_writes_nothing(
    store: MemoryStore,
) -> None:
    async def main() -> None:
        claim_ = TickClaim(schedule_id="s", fingerprint="f", tick=START, expected=None, job=job())
        with pytest.raises(JobRejected, match="installing a schedule never fires a job"):
            await store.schedule_claim_tick(claim_)
        assert await store.schedule_get(["s"]) == {}
        assert await store.job_list(JobQuery()) == []
        assert await store.schedule_fires("s") == []

    run(main)
