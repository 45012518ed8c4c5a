"""A burst (`ket worker --burst`): the tenant worker drains what is due, the jobs those enqueue
included, sweeps the schedules once, then says it is drained; the fleet stops each tenant's
worker once drained and reports what was discarded."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ket import Discard, define_deployment, define_job, define_module
from ket.catalog import Catalog, EnqueueOptions
from ket.errors import StoreError
from ket.runtime.contexts import Contexts
from ket.runtime.events import Hooks
from ket.runtime.fleet import Drained, Fleet
from ket.runtime.sweep import sweep
from ket.runtime.worker import TenantWorker
from ket.storage import LocalBlobs
from ket.store import ClaimedJob, JobClaim, JobQuery, ManualClock
from ket.store.contract import JobStore
from ket.store.memory import MemoryStore
from ket.store.types import Rescued
from ket.transport import CaptureSender

ran: list[str] = []


async def parent(ctx: Any, input: Any) -> None:
    ran.append(f"parent {input.n}")
    await asyncio.sleep(0.05)  # the other queue's first claim finds nothing meanwhile
    await ctx.jobs.enqueue("t.child", {"n": input.n})
    await ctx.jobs.enqueue("t.child", {"n": -input.n}, run_at=ctx.now() + timedelta(hours=1))


async def child(ctx: Any, input: Any) -> None:
    ran.append(f"child {input.n}")


async def give_up(ctx: Any, input: Any) -> None:
    raise Discard("no recipient")


async def fails(ctx: Any, input: Any) -> None:
    raise ValueError("still broken")


async def tick(ctx: Any, input: Any) -> None:
    ran.append("tick")


module = define_module(
    name="t",
    jobs={
        "parent": define_job(
            idempotent=True, input={"n": "int"}, effects=["enqueue:t.child"], handler=parent
        ),
        "child": define_job(idempotent=True, queue="other", input={"n": "int"}, handler=child),
        "give_up": define_job(idempotent=True, handler=give_up),
        "fails": define_job(idempotent=True, backoff=lambda attempt: 60.0, handler=fails),
        "tick": define_job(idempotent=True, schedule={"every": "10s"}, handler=tick),
    },
)
CATALOG = Catalog.build(
    define_deployment(
        name="test",
        modules=[module],
        worker={"queues": {"default": 2, "other": 1}, "poll_max_ms": 60_000, "lease_ms": 2_000},
    )
)
START = datetime(2030, 1, 15, 12, 0, 5, tzinfo=UTC)
HOUR = timedelta(hours=1)


def _worker(store: JobStore, executor: ThreadPoolExecutor, clock: ManualClock) -> TenantWorker:
    contexts = Contexts(
        store=store,
        catalog=CATALOG,
        tenant="default",
        sender=CaptureSender(),
        storage_root=tempfile.mkdtemp(prefix="ket-test-"),
        clock=clock.now,  # the store's: ctx.now() + 1 h is due after the store's now
    )
    return TenantWorker(
        store=store,
        catalog=CATALOG,
        tenant="default",
        worker_id="w1",
        executor=executor,
        contexts=contexts,
        burst=True,
    )


@dataclass(frozen=True)
class Burst:
    """What a burst left: each job's name and state, and the jobs it discarded."""

    states: list[tuple[str, str]]
    discarded: int


def burst(arrange: Callable[[MemoryStore, ManualClock], Awaitable[None]]) -> Burst:
    """Arrange the store, then run a burst worker until it is drained (within 10 s) and stop
    it."""
    ran.clear()

    async def main() -> Burst:
        clock = ManualClock(START)
        store = MemoryStore(clock=clock)
        await arrange(store, clock)
        with ThreadPoolExecutor(2) as executor:
            worker = _worker(store, executor, clock)
            assert worker.burst is not None
            worker.start()
            try:
                await asyncio.wait_for(worker.burst.done.wait(), 10)
            finally:
                await worker.stop(grace_seconds=0.5)
        records = await store.job_list(JobQuery(limit=100))
        await store.close()
        return Burst(sorted((r.name, r.state) for r in records), worker.burst.discarded)

    return asyncio.run(main())


def test_a_burst_runs_what_is_due_and_what_that_enqueues_then_is_drained() -> None:
    async def arrange(store: MemoryStore, clock: ManualClock) -> None:
        later = CATALOG.new_job(
            "t.child", {"n": 99}, EnqueueOptions(run_at=clock.now() + timedelta(minutes=5))
        )
        await store.job_insert([CATALOG.new_job("t.parent", {"n": n}) for n in (1, 2, 3)])
        await store.job_insert([later])

    done = burst(arrange)
    assert sorted(ran) == ["child 1", "child 2", "child 3", "parent 1", "parent 2", "parent 3"]
    assert done.states.count(("t.parent", "completed")) == 3
    assert done.states.count(("t.child", "completed")) == 3
    # work due later, enqueued before the burst or by it, is left alone
    assert done.states.count(("t.child", "scheduled")) == 4
    assert done.discarded == 0


def test_a_burst_counts_what_it_discarded_and_leaves_a_retry_for_later() -> None:
    async def arrange(store: MemoryStore, clock: ManualClock) -> None:
        await store.job_insert([CATALOG.new_job("t.give_up"), CATALOG.new_job("t.fails")])

    done = burst(arrange)
    assert done.states == [("t.fails", "retryable"), ("t.give_up", "discarded")]
    assert done.discarded == 1


def test_a_burst_sweeps_the_schedules_once_and_runs_the_tick_it_fired() -> None:
    async def arrange(store: MemoryStore, clock: ManualClock) -> None:
        await sweep(store, CATALOG, tenant="default", hooks=Hooks())  # installs: fires nothing
        clock.advance(seconds=30)  # three ticks passed over: one fire

    done = burst(arrange)
    assert ran == ["tick"]
    assert done.states == [("t.tick", "completed")]


def test_a_burst_with_nothing_due_is_drained_at_once() -> None:
    async def arrange(store: MemoryStore, clock: ManualClock) -> None:
        await store.job_insert(
            [CATALOG.new_job("t.child", {"n": 1}, EnqueueOptions(run_at=clock.now() + HOUR))]
        )

    done = burst(arrange)
    assert (ran, done.states, done.discarded) == ([], [("t.child", "scheduled")], 0)


def test_the_fleet_drains_every_tenant_stops_each_and_names_those_it_could_not_open() -> None:
    stores: dict[str, MemoryStore] = {}

    async def open_store(url: str, **options: Any) -> JobStore:
        if url == "memory://broken":
            raise ConnectionError("the database is away")
        stores[url] = store = MemoryStore()
        await store.job_insert([CATALOG.new_job("t.parent", {"n": 1})])
        if url == "memory://globex":
            await store.job_insert([CATALOG.new_job("t.give_up")])
        return store

    async def tenants() -> dict[str, str | None]:
        return {name: f"memory://{name}" for name in ("acme", "broken", "globex")}

    async def main() -> Drained:
        fleet = Fleet(
            catalog=CATALOG,
            template="memory://{tenant}",
            list_tenants=tenants,
            open_store=open_store,
            worker_id="w1",
            sender=CaptureSender(),
            blobs=LocalBlobs(tempfile.mkdtemp(prefix="ket-test-")),
            hooks=Hooks(),
            burst=True,
        )
        drained = await asyncio.wait_for(fleet.drain(asyncio.Event()), 10)
        assert fleet.workers == {}  # each stopped once drained
        return drained

    ran.clear()
    drained = asyncio.run(main())
    assert (drained.tenants, drained.failed) == (("acme", "globex"), ("broken",))
    assert drained.discarded == 1
    assert sorted(ran) == ["child 1", "child 1", "parent 1", "parent 1"]


class NoTables(MemoryStore):
    """A database without ket's tables: every statement fails."""

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        raise StoreError("database error: no such table: ket_jobs; run `ket migrate`")

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        raise StoreError("database error: no such table: ket_jobs; run `ket migrate`")


def test_a_burst_gives_up_a_tenant_whose_database_fails_its_first_statements() -> None:
    async def main() -> tuple[str | None, int]:
        store = NoTables()
        with ThreadPoolExecutor(1) as executor:
            worker = _worker(store, executor, ManualClock(START))
            assert worker.burst is not None
            worker.start()
            try:
                await asyncio.wait_for(worker.burst.done.wait(), 10)
            finally:
                await worker.stop(grace_seconds=0.5)
        return worker.burst.failure, worker.attempts.started

    failure, claimed = asyncio.run(main())
    assert failure == "database error: no such table: ket_jobs; run `ket migrate`"
    assert claimed == 0  # no claim before the first statements answered
