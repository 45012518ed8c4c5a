"""The tenant worker on the memory store: outcomes, retries, timeouts, cancel, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import ValidationError

from ket import Discard, Retry, define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import JobRejected
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks
from ket.runtime.queue import PREFETCH_AT_LEAST
from ket.runtime.rescue import RescueService
from ket.runtime.worker import TenantWorker
from ket.store import ClaimedJob, JobClaim, JobQuery, JobRecord, NewJob
from ket.store.memory import MemoryStore
from ket.store.types import Look
from ket.transport import CaptureSender

QUEUES = {"default": 4, "slow": 2}
FAST = {
    "queues": QUEUES,
    "poll_min_ms": 5,
    "poll_max_ms": 50,
    "lease_ms": 2_000,
    "schedule_sweep_ms": 60_000,
    "shutdown_grace_ms": 200,
}
calls: list[str] = []


async def ok_async(ctx: Any, input: Any) -> None:
    calls.append(f"async {ctx.job.attempt}")


def ok_sync(ctx: Any, input: Any) -> None:
    calls.append(f"sync {input.n}")
    ctx.jobs.enqueue("t.ok_async", {})


async def flaky(ctx: Any, input: Any) -> None:
    if ctx.job.attempt < 2:
        raise RuntimeError(f"boom on attempt {ctx.job.attempt}")


async def retry_later(ctx: Any, input: Any) -> None:
    if ctx.job.attempt == 1:
        raise Retry(in_seconds=0.05)


async def give_up(ctx: Any, input: Any) -> None:
    raise Discard("no recipient")


async def always_fails(ctx: Any, input: Any) -> None:
    raise ValueError("still broken")


async def ignores_signal(ctx: Any, input: Any) -> None:
    await asyncio.sleep(30)


async def undeclared(ctx: Any, input: Any) -> None:
    await ctx.jobs.enqueue("t.ok_async", {})


async def waits_for_abort(ctx: Any, input: Any) -> None:
    calls.append("started")
    reason = await ctx.signal.wait()
    calls.append(f"aborted {reason}")
    ctx.signal.throw_if_aborted()


async def returns_after_abort(ctx: Any, input: Any) -> None:
    await ctx.signal.wait()  # notices the abort, then returns as if all were well


async def slightly_too_slow(ctx: Any, input: Any) -> None:
    await asyncio.sleep(0.3)  # past its 0.1 s timeout, but within the abort grace


gate: asyncio.Event | None = None  # a scenario's gate for t.gated


async def gated(ctx: Any, input: Any) -> None:
    assert gate is not None
    calls.append(f"gated {input.n}")
    await gate.wait()


module = define_module(
    name="t",
    jobs={
        "gated": define_job(idempotent=True, input={"n": "int"}, handler=gated),
        "ok_async": define_job(idempotent=True, handler=ok_async),
        "ok_sync": define_job(
            idempotent=True, input={"n": "int"}, effects=["enqueue:t.ok_async"], handler=ok_sync
        ),
        "flaky": define_job(idempotent=True, backoff=lambda attempt: 0.01, handler=flaky),
        "retry_later": define_job(idempotent=True, handler=retry_later),
        "give_up": define_job(idempotent=True, handler=give_up),
        "always_fails": define_job(
            idempotent=True, max_attempts=2, backoff=lambda attempt: 0.01, handler=always_fails
        ),
        "ignores_signal": define_job(
            idempotent=True, timeout_ms=100, max_attempts=1, handler=ignores_signal
        ),
        "undeclared": define_job(idempotent=True, handler=undeclared),
        "waits_for_abort": define_job(idempotent=True, queue="slow", handler=waits_for_abort),
        "returns_after_abort": define_job(
            idempotent=True, queue="slow", handler=returns_after_abort
        ),
        "slightly_too_slow": define_job(
            idempotent=True, timeout_ms=100, max_attempts=1, handler=slightly_too_slow
        ),
    },
)
CATALOG = Catalog.build(define_deployment(name="test", modules=[module], worker=FAST))

Scenario = Callable[[MemoryStore, TenantWorker, list[Event]], Awaitable[None]]


def run(
    scenario: Scenario,
    make_store: Callable[[], MemoryStore] = MemoryStore,
    catalog: Catalog = CATALOG,
    fleet: int | None = None,
) -> None:
    """`scenario` with a started worker; `fleet`: how many tenants the fleet serves (it
    spreads the first visit over `fleet / 50` s)."""
    calls.clear()

    async def main() -> None:
        store = make_store()
        hooks = Hooks()
        events: list[Event] = []
        hooks.subscribe(events.append)
        with ThreadPoolExecutor(4) as executor:
            contexts = Contexts(
                store=store,
                catalog=catalog,
                tenant="default",
                sender=CaptureSender(),
                storage_root=tempfile.mkdtemp(prefix="ket-test-"),
                hooks=hooks,
            )
            worker = TenantWorker(
                store=store,
                catalog=catalog,
                tenant="default",
                worker_id="w1",
                executor=executor,
                hooks=hooks,
                contexts=contexts,
                fleet=None if fleet is None else lambda: fleet,
            )
            worker.start()
            try:
                await scenario(store, worker, events)
            finally:
                await worker.stop(grace_seconds=0.5)
                await store.close()

    asyncio.run(main())


async def enqueue(store: MemoryStore, name: str, input: dict[str, Any] | None = None) -> int:
    [inserted] = await store.job_insert([CATALOG.new_job(name, input)])
    return inserted.id


async def settled(
    store: MemoryStore,
    job_id: int,
    states: tuple[str, ...] = ("completed", "discarded", "cancelled"),
    timeout: float = 10.0,
) -> JobRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = await store.job_get(job_id)
        if record is not None and record.state in states:
            return record
        await asyncio.sleep(0.01)
    raise AssertionError(f"job {job_id} did not reach {states}: {await store.job_get(job_id)}")


def test_async_and_plain_handlers_complete_and_plain_ones_enqueue_without_await() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        job_id = await enqueue(store, "t.ok_sync", {"n": 7})
        assert (await settled(store, job_id)).state == "completed"
        children = await store.job_list(JobQuery(names=("t.ok_async",)))
        assert len(children) == 1
        assert (await settled(store, children[0].id)).state == "completed"
        assert calls == ["sync 7", "async 1"]
        enqueued = [(e.kind, e.name, e.job_id) for e in events if e.kind == "enqueued"]
        assert enqueued == [("enqueued", "t.ok_async", children[0].id)]

    run(scenario)


def test_a_failure_is_retried_after_backoff_with_its_error_recorded() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        record = await settled(store, await enqueue(store, "t.flaky"))
        assert (record.state, record.attempt) == ("completed", 2)
        assert [(e.attempt, e.error) for e in record.errors] == [
            (1, "RuntimeError: boom on attempt 1")
        ]
        assert "Traceback" in (record.errors[0].traceback or "")

    run(scenario)


def test_retry_and_discard_raised_by_the_handler_steer_the_outcome() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        retried = await settled(store, await enqueue(store, "t.retry_later"))
        assert (retried.state, retried.attempt) == ("completed", 2)
        discarded = await settled(store, await enqueue(store, "t.give_up"))
        assert (discarded.state, discarded.attempt) == ("discarded", 1)
        assert [e.error for e in discarded.errors] == ["no recipient"]

    run(scenario)


def test_exhausting_max_attempts_discards_and_keeps_every_error() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        record = await settled(store, await enqueue(store, "t.always_fails"))
        assert (record.state, record.attempt) == ("discarded", 2)
        assert [e.attempt for e in record.errors] == [1, 2]
        assert record.errors[1].error == ("ValueError: still broken (attempt 2 of 2: giving up)")
        kinds = [e.kind for e in events if e.name == "t.always_fails"]
        assert kinds == ["started", "failed", "started", "discarded"]

    run(scenario)


def test_a_handler_that_ignores_its_timeout_still_fails_with_a_timeout_error() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        record = await settled(store, await enqueue(store, "t.ignores_signal"))
        assert record.state == "discarded"
        assert record.errors[0].error == "timed out after 0.1s (attempt 1 of 1: giving up)"

    run(scenario)


def test_an_undeclared_enqueue_discards_the_job_naming_the_missing_effect() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        record = await settled(store, await enqueue(store, "t.undeclared"))
        assert record.state == "discarded"
        assert "declare the effect 'enqueue:t.ok_async'" in record.errors[0].error
        assert await store.job_list(JobQuery(names=("t.ok_async",))) == []

    run(scenario)


def test_an_operator_cancel_aborts_the_running_handler_with_reason_cancelled() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        job_id = await enqueue(store, "t.waits_for_abort")
        await settled(store, job_id, ("executing",))
        change = await store.job_cancel(job_id)
        assert change.reason == "cancel requested: its worker aborts it"
        record = await settled(store, job_id)
        assert record.state == "cancelled"
        assert calls == ["started", "aborted cancelled"]

    run(scenario)


def test_stopping_hands_unfinished_work_back_without_using_an_attempt() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        job_id = await enqueue(store, "t.waits_for_abort")
        await settled(store, job_id, ("executing",))
        started = time.monotonic()
        await worker.stop(grace_seconds=0.2)
        assert time.monotonic() - started < 5
        record = await store.job_get(job_id)
        assert record is not None
        assert (record.state, record.attempt, record.errors) == ("available", 0, ())
        assert calls == ["started", "aborted shutdown"]

    run(scenario)


def test_a_job_finishing_within_a_grace_longer_than_its_lease_keeps_its_lease() -> None:
    global gate
    gate = asyncio.Event()

    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert gate is not None
        job_id = await enqueue(store, "t.gated", {"n": 1})
        await settled(store, job_id, ("executing",))
        stopping = asyncio.ensure_future(worker.stop(grace_seconds=5.0))
        await asyncio.sleep(2.5)  # past the 2 s lease: only heartbeats kept it
        another = RescueService(store, Hooks(), tenant="default", interval=1.0)
        await another.tick()  # what another worker's rescue does meanwhile
        record = await store.job_get(job_id)
        assert record is not None and record.state == "executing"
        gate.set()
        await stopping
        record = await store.job_get(job_id)
        assert record is not None and (record.state, record.attempt) == ("completed", 1)

    run(scenario)


def test_a_payload_that_no_longer_matches_the_input_is_discarded_not_retried() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        [inserted] = await store.job_insert([NewJob(name="t.ok_sync", payload={"n": "seven"})])
        record = await settled(store, inserted.id)
        assert (record.state, record.attempt) == ("discarded", 1)
        assert record.errors[0].error.startswith(
            "payload does not match the input of t.ok_sync: n: Input should be a valid integer"
        )

    run(scenario)


def test_rows_of_a_job_the_deployment_no_longer_ships_are_discarded() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        [inserted] = await store.job_insert([NewJob(name="t.removed")])
        record = await settled(store, inserted.id)
        assert record.state == "discarded"
        assert record.errors[0].error == "no job 't.removed' in deployment 'test'"

    run(scenario)


def test_queues_run_no_more_jobs_at_once_than_their_concurrency() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        ids = [await enqueue(store, "t.waits_for_abort") for _ in range(5)]
        await asyncio.sleep(0.3)
        executing = await store.job_list(JobQuery(states=("executing",)))
        assert len(executing) == 2  # the "slow" queue has 2 slots
        assert worker.running == 2
        for job_id in ids:
            await store.job_cancel(job_id)

    run(scenario)


def test_the_catalog_refuses_unknown_jobs_and_invalid_input() -> None:
    with pytest.raises(JobRejected) as unknown:
        CATALOG.new_job("t.nope")
    assert str(unknown.value).startswith("unknown job 't.nope' in deployment 'test'")
    with pytest.raises(ValidationError) as invalid:
        CATALOG.new_job("t.ok_sync", {"n": "x"})
    assert invalid.value.errors()[0]["loc"] == ("n",)


def test_a_cancelled_handler_that_returns_normally_still_ends_cancelled() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        job_id = await enqueue(store, "t.returns_after_abort")
        await settled(store, job_id, ("executing",))
        await store.job_cancel(job_id)
        assert (await settled(store, job_id)).state == "cancelled"

    run(scenario)


def test_a_handler_that_returns_after_its_timeout_fails_the_attempt() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        record = await settled(store, await enqueue(store, "t.slightly_too_slow"))
        assert record.state == "discarded"
        assert record.errors[0].error == "timed out after 0.1s (attempt 1 of 1: giving up)"

    run(scenario)


async def short_jobs_ran(store: MemoryStore) -> None:
    """Run a few quick jobs, so the default queue knows its jobs are short (prefetch on)."""
    for job_id in [await enqueue(store, "t.gated", {"n": -1}) for _ in range(4)]:
        await settled(store, job_id)


async def executing(store: MemoryStore) -> list[JobRecord]:
    return await store.job_list(JobQuery(states=("executing",)))


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "the condition never held"
        await asyncio.sleep(0.01)


async def claimed_ahead(store: MemoryStore, count: int) -> tuple[list[int], set[int]]:
    """Enqueue `count` gated jobs on a queue of short jobs (4 slots), and wait until all are
    claimed (at most 4 + PREFETCH_AT_LEAST): 4 running behind the gate, the others waiting for
    a slot. Their ids, and the n of those running."""
    global gate
    gate = asyncio.Event()
    gate.set()
    await short_jobs_ran(store)
    calls.clear()
    gate.clear()
    ids = [await enqueue(store, "t.gated", {"n": n}) for n in range(count)]

    assert count <= 4 + PREFETCH_AT_LEAST

    async def all_claimed() -> bool:
        return len(await executing(store)) == count

    await until(all_claimed)
    await asyncio.sleep(0.05)  # the four with a slot have started
    ran = {int(c.split()[1]) for c in calls}
    assert len(ran) == 4
    return ids, ran


def test_a_queue_of_short_jobs_claims_a_slot_ahead_and_starts_them_as_slots_free() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        ids, _ = await claimed_ahead(store, 10)
        assert worker.running == 4
        assert gate is not None
        gate.set()
        records = [await settled(store, job_id) for job_id in ids]
        assert [(r.state, r.attempt) for r in records] == [("completed", 1)] * 10
        assert sorted(calls) == sorted(f"gated {n}" for n in range(10))

    run(scenario)


def test_a_queue_of_short_jobs_claims_no_more_ahead_than_its_prefetch() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        global gate
        gate = asyncio.Event()
        gate.set()
        await short_jobs_ran(store)
        gate.clear()
        limit = 4 + PREFETCH_AT_LEAST  # 4 slots, and the jobs that may wait for one
        ids = [await enqueue(store, "t.gated", {"n": n}) for n in range(limit + 5)]

        async def claimed() -> bool:
            return len(await executing(store)) == limit

        await until(claimed)
        await asyncio.sleep(0.2)  # claim rounds enough to take more, if it would
        assert len(await executing(store)) == limit
        assert len(await store.job_list(JobQuery(states=("available",)))) == 5
        gate.set()
        assert {(await settled(store, job_id)).state for job_id in ids} == {"completed"}

    run(scenario)


def test_stopping_hands_back_the_claimed_jobs_that_waited_for_a_slot_at_once() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        ids, ran = await claimed_ahead(store, 8)
        stopping = asyncio.ensure_future(worker.stop(grace_seconds=5.0))
        waiting = [job_id for n, job_id in enumerate(ids) if n not in ran]

        async def handed_back() -> bool:
            records = [await store.job_get(job_id) for job_id in waiting]
            return all(r is not None and r.state == "available" for r in records)

        # back while every slot is still taken: they do not wait for the running jobs to end
        await until(handed_back, timeout=2.0)
        assert len(await executing(store)) == 4
        assert gate is not None
        gate.set()  # the running four finish within the grace
        await stopping
        for n, job_id in enumerate(ids):
            record = await store.job_get(job_id)
            assert record is not None
            expected = ("completed", 1) if n in ran else ("available", 0)
            assert (record.state, record.attempt, record.errors) == (*expected, ())
        assert {int(c.split()[1]) for c in calls} == ran
        assert len([e for e in events if e.kind == "handed_back"]) == 4

    run(scenario)


def test_a_job_cancelled_while_it_waits_for_a_slot_ends_cancelled_without_running() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        ids, ran = await claimed_ahead(store, 8)
        waiting = [job_id for n, job_id in enumerate(ids) if n not in ran]
        change = await store.job_cancel(waiting[0])
        assert change.reason == "cancel requested: its worker aborts it"
        await asyncio.sleep(1.0)  # a heartbeat (every lease / 3) carries the request back
        assert gate is not None
        gate.set()
        record = await settled(store, waiting[0])
        assert (record.state, record.errors[-1].error) == (
            "cancelled",
            "cancelled by an operator while running",
        )
        for job_id in ids:
            if job_id != waiting[0]:
                assert (await settled(store, job_id)).state == "completed"
        assert f"gated {ids.index(waiting[0])}" not in calls

    run(scenario)


def test_a_queue_of_long_jobs_claims_no_more_than_its_free_slots() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        global gate
        gate = asyncio.Event()
        ids = [await enqueue(store, "t.gated", {"n": n}) for n in range(6)]
        await asyncio.sleep(0.3)  # several claim rounds: nothing ended yet, so no prefetch
        assert len(await executing(store)) == 4
        gate.set()
        for job_id in ids:
            assert (await settled(store, job_id)).state == "completed"

    run(scenario)


class SlowDueTimes(MemoryStore):
    """A paced store (hints and visits wake its queues) whose answer to "when is the next job
    due" never comes: its connection waits in a spent budget, say."""

    paced = True

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    def idle_poll(self, poll_max: float) -> float:
        return 3_600.0  # the queue waits long for a wake-up: it asks when work is due

    async def wake_when_due(self, queue: str) -> None:
        self.asked.set()
        await asyncio.Event().wait()

    def wake(self, queues: Collection[str]) -> None:
        return None

    def wake_in(self, queue: str, seconds: float) -> None:
        return None

    async def lease_end(self) -> float | None:
        return None

    async def look(self, queues: Collection[str]) -> Look:
        return Look(lease_end=None, due={})

    def woken_since_claim(self, queue: str) -> bool:
        return True


def test_a_wake_up_is_not_held_back_by_the_question_of_when_work_is_due() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert isinstance(store, SlowDueTimes)
        await asyncio.wait_for(store.asked.wait(), 5)  # idle, and its question hangs
        job_id = await enqueue(store, "t.ok_async")  # the insert wakes the queue
        record = await settled(store, job_id, timeout=2.0)
        assert record.state == "completed"

    run(scenario, SlowDueTimes)


class TimedClaims(MemoryStore):
    """A paced store that, like the SQL store, knows when each claim began and when each queue
    was last woken; it counts the claims."""

    paced = True

    def __init__(self) -> None:
        super().__init__()
        self.claims = 0
        self.claims_of: Counter[str] = Counter()  # by queue
        self.began: dict[str, float] = {}

    def idle_poll(self, poll_max: float) -> float:
        return 3_600.0

    async def wake_when_due(self, queue: str) -> None:
        return None

    def wake(self, queues: Collection[str]) -> None:
        return None  # the safety visit's wake-up, left out: this test counts claims

    def wake_in(self, queue: str, seconds: float) -> None:
        return None

    async def lease_end(self) -> float | None:
        return None

    async def look(self, queues: Collection[str]) -> Look:
        return Look(lease_end=None, due={})

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        self.claims += 1
        self.claims_of[claim.queue] += 1
        self.database.wakeups.woken_at.setdefault(claim.queue, 0.0)
        self.began[claim.queue] = time.monotonic()
        return await super().job_claim(claim)

    def woken_since_claim(self, queue: str) -> bool:
        return self.database.wakeups.woken_at.get(queue, 0.0) >= self.began.get(queue, -1.0)


def test_a_wake_up_the_last_claim_saw_to_brings_no_claim_and_a_later_one_does() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert isinstance(store, TimedClaims)
        first = await enqueue(store, "t.ok_async")
        await settled(store, first)
        await asyncio.sleep(0.1)  # the queue waits for a wake-up now (its poll: 60 s)
        claims = store.claims
        # a wake-up stamped before the last claim began: what it announced, that claim saw
        store.database.wakeups.woken_at["default"] = store.began["default"] - 1.0
        store.database.wakeups._wake(lambda waiter: True)
        await asyncio.sleep(0.2)
        assert store.claims == claims
        second = await enqueue(store, "t.ok_async")  # a wake-up after it: claimed at once
        assert (await settled(store, second, timeout=2.0)).state == "completed"
        assert store.claims == claims + 1

    slow_poll = {**FAST, "poll_min_ms": 60_000, "poll_max_ms": 60_000}
    catalog = Catalog.build(define_deployment(name="test", modules=[module], worker=slow_poll))
    run(scenario, TimedClaims, catalog)


def test_a_queue_woken_by_hints_claims_nothing_more_after_a_job_until_it_is_woken() -> None:
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert isinstance(store, TimedClaims)
        first = await enqueue(store, "t.ok_async")
        await settled(store, first)
        # the queue of the job, not the other queue's first claims, which a busy machine may
        # still be making
        claims = store.claims_of["default"]
        # poll_min is 5 ms: a queue polling down from it would claim about 7 times in 0.6 s
        await asyncio.sleep(0.6)
        assert store.claims_of["default"] == claims
        second = await enqueue(store, "t.ok_async")  # its hint wakes the queue at once
        assert (await settled(store, second, timeout=2.0)).state == "completed"
        assert store.claims_of["default"] == claims + 1

    run(scenario, TimedClaims)


def test_an_idle_tenant_worker_holds_no_task_only_timers_and_callbacks() -> None:
    # a thousand tenants' idle workers: each task of an idle tenant (a claim loop and its wait
    # for work, a wait for the stop signal or for a gate) cost about 1 KB a tenant; a claim
    # loop with nothing to do is parked on a watch for work, the settler with nothing to
    # record until its next outcome is put, and the heartbeat and the lease
    # guard, which have nothing to do while no attempt runs, hold none once they found their
    # gate shut (a tick after the last attempt)
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        job_id = await enqueue(store, "t.ok_async")
        await settled(store, job_id)
        # the attempt is over: its gate closed; the heartbeat (every 0.67 s) and the lease
        # guard (0.2 s) tick once more, find it shut, and end
        await asyncio.sleep(1.0)
        supervised = set(worker.supervisor._tasks) | set(worker._leases._tasks)
        current = asyncio.current_task()
        beside = [task for task in asyncio.all_tasks() if task not in supervised | {current}]
        assert beside == []
        # no claim loop, no settler, no heartbeat, no lease guard; rescue, sweep, prune and the
        # minute count hold timers between their ticks
        assert supervised == set()
        timers = [t for t in worker.supervisor._ticking if t.timer is not None]
        assert sorted(t.service.name for t in timers) == [
            "minutes",
            "prune",
            "rescue",
            "schedule sweep",
        ]
        assert all(loop._parked is not None for loop in worker._loops)
        assert worker.settler._parked
        # a job enqueued now wakes its parked queue at once, and its attempt the gated ones
        second = await enqueue(store, "t.ok_async")
        assert (await settled(store, second, timeout=2.0)).state == "completed"

    run(scenario)


class VisitedClaims(TimedClaims):
    """TimedClaims whose safety visit wakes the queues, as the SQL store's does; it notes
    when the first visit came."""

    def __init__(self) -> None:
        super().__init__()
        self.first_visit: float | None = None
        self.first_claims: dict[str, float] = {}

    def wake(self, queues: Collection[str]) -> None:
        if self.first_visit is None:
            self.first_visit = time.monotonic()
        self.database.wakeups.notify(queues)

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        self.first_claims.setdefault(claim.queue, time.monotonic())
        return await super().job_claim(claim)


def test_a_paced_tenant_s_queues_claim_first_at_its_first_visit_not_at_the_start() -> None:
    # a thousand tenants starting together would each open a connection for their first
    # claims at once, and another for their visit: the claims come with the visit instead
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert isinstance(store, VisitedClaims)
        deadline = time.monotonic() + 5
        while store.first_visit is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert store.first_visit is not None
        await asyncio.sleep(0.2)
        assert set(store.first_claims) == set(QUEUES)
        assert min(store.first_claims.values()) >= store.first_visit
        assert dict(store.claims_of) == {"default": 1, "slow": 1}  # none at the start
        job_id = await enqueue(store, "t.ok_async")  # and the queues claim when woken
        assert (await settled(store, job_id)).state == "completed"

    run(scenario, VisitedClaims, fleet=25)  # its first visit within 0.5 s of the start


class LosesACancel(TimedClaims):
    """A paced store whose claim, once `losing` is set, loses the cancel that reaches it: as
    asyncio.wait_for did in Python 3.11 when the cancel met its result (a lane connection
    handed over in that moment, at a worker's stop)."""

    def __init__(self) -> None:
        super().__init__()
        self.losing = asyncio.Event()
        self.claiming = asyncio.Event()

    def idle_poll(self, poll_max: float) -> float:
        return 20.0  # waits paced for hints are long

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        if not self.losing.is_set():
            return await super().job_claim(claim)
        self.claiming.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1.0)
        return []


def test_a_claim_loop_whose_stop_cancel_was_lost_in_a_claim_does_not_wait_for_work() -> None:
    # the budget grid's 200 tenants at budget 4: one tenant's loop went on to wait minutes for
    # work, and the worker did not stop within 60 s of SIGTERM
    async def scenario(store: MemoryStore, worker: TenantWorker, events: list[Event]) -> None:
        assert isinstance(store, LosesACancel)
        await asyncio.sleep(0.1)
        store.losing.set()
        store.database.wakeups.notify(["default"])  # the queue claims, and is cancelled there
        await asyncio.wait_for(store.claiming.wait(), 5)
        began = time.monotonic()
        await worker.stop(grace_seconds=0.1)
        assert time.monotonic() - began < 5

    run(scenario, LosesACancel)
