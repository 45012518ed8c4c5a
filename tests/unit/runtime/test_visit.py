"""The safety visit of a tenant woken by hints: it rescues, has the queues with a job due claim
(every queue at the first visit) and the others woken when their next job is due, prunes, and
comes back when a running job's lease ends if that is sooner than its pace."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import timedelta
from typing import Any

import pytest

from ket.errors import StoreError
from ket.runtime.events import Event, Hooks
from ket.runtime.rescue import Hold
from ket.runtime.visit import (
    AFTER_LEASE_SECONDS,
    VISIT_AT_LEAST_SECONDS,
    VISITS_PER_SECOND,
    VisitService,
    visit_every,
)
from ket.store import JobClaim, JobQuery, JobStore, NewJob, Rescued
from ket.store.clock import ManualClock
from ket.store.memory import MemoryStore
from ket.store.types import RUNNABLE_STATES, Look


class Visited(MemoryStore):
    """The memory store with what a visit asks of a paced store."""

    paced = True

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.woken: list[tuple[str, ...]] = []
        self.woken_in: dict[str, float] = {}
        self.looks = 0  # visits made

    def idle_poll(self, poll_max: float) -> float:
        return poll_max

    async def wake_when_due(self, queue: str) -> None:
        return None

    def wake(self, queues: Collection[str]) -> None:
        self.woken.append(tuple(queues))

    async def lease_end(self) -> float | None:
        now = await self.now()
        running = await self.job_list(JobQuery(states=("executing",), limit=1_000))
        ends = [job.lease_until for job in running if job.lease_until is not None]
        return None if not ends else max((min(ends) - now).total_seconds(), 0.0)

    async def look(self, queues: Collection[str]) -> Look:
        self.looks += 1
        now = await self.now()
        waiting = await self.job_list(JobQuery(states=RUNNABLE_STATES, limit=1_000))
        due: dict[str, float] = {}
        for job in waiting:
            if job.queue in queues:
                left = max((job.run_at - now).total_seconds(), 0.0)
                due[job.queue] = min(left, due.get(job.queue, left))
        return Look(lease_end=await self.lease_end(), due=due)

    def wake_in(self, queue: str, seconds: float) -> None:
        self.woken_in[queue] = seconds

    def woken_since_claim(self, queue: str) -> bool:
        return True


def test_a_visit_rescues_then_wakes_every_queue_and_paces_itself() -> None:
    async def main() -> None:
        clock = ManualClock()
        store = Visited(clock)
        events: list[Event] = []
        hooks = Hooks()
        hooks.subscribe(events.append)
        visit = VisitService(
            store, hooks, tenant="acme", queues=["default", "mail"], served=lambda: 800
        )
        # nothing runs: its pace, 800 tenants at 8 visits a second
        assert 80.0 <= await visit.tick() <= 120.0
        assert store.woken == [("default", "mail")]
        await store.job_insert([NewJob(name="t.work")])
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="gone", lease_seconds=30)
        )
        assert await visit.tick() == pytest.approx(31.0)  # back when that lease ends
        clock.advance(seconds=31)
        await visit.tick()
        assert [(e.kind, e.job_id) for e in events] == [("rescued", job.id)]
        await store.close()

    asyncio.run(main())


class Rescues(Visited):
    """Counts the rescues asked of it."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.rescues = 0

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        self.rescues += 1
        return await super().job_rescue(limit)


def test_a_visit_rescues_only_once_a_lease_has_ended() -> None:
    # a rescue is a transaction of its own: visits that find no lease ended run none
    async def main() -> None:
        clock = ManualClock()
        store = Rescues(clock)
        visit = VisitService(store, Hooks(), tenant="acme", queues=["default"], served=lambda: 8)
        await visit.tick()
        assert store.rescues == 0  # nothing runs
        await store.job_insert([NewJob(name="t.work")])
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="gone", lease_seconds=30)
        )
        clock.advance(seconds=29)
        assert await visit.tick() == pytest.approx(2.0)
        assert store.rescues == 0  # its lease has a second left
        clock.advance(seconds=2)
        # rescued, and nothing runs any more: back at its pace
        assert 0.8 * VISIT_AT_LEAST_SECONDS <= await visit.tick() <= 1.2 * VISIT_AT_LEAST_SECONDS
        assert store.rescues == 1
        rescued = await store.job_get(job.id)
        assert rescued is not None and rescued.state == "retryable"
        # the first visit has every queue claim; the second found nothing runnable; the third,
        # the job its rescue made runnable at once
        assert store.woken == [("default",)] * 2
        await store.close()

    asyncio.run(main())


def test_the_pace_keeps_a_process_near_its_visits_per_second() -> None:
    assert visit_every(1) == VISIT_AT_LEAST_SECONDS
    assert visit_every(100) == VISIT_AT_LEAST_SECONDS
    assert visit_every(1_000) == pytest.approx(1_000 / VISITS_PER_SECOND)


def test_the_memory_store_stands_in_for_a_job_store() -> None:
    assert isinstance(Visited(ManualClock()), JobStore)


class Scripted:
    """A tenant's schedule sweep or pruner as the visit sees it: each call (`tick`, `batch`)
    is counted and answers the next of `answers` (the seconds until the next tick's sweep; for
    a pruner, whether more is left)."""

    interval = 300.0  # a pruner's

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.calls = 0

    async def tick(self) -> Any:
        self.calls += 1
        return self.answers.pop(0)

    batch = tick


def test_a_visit_sweeps_the_schedules_and_wakes_for_a_tick_s_sweep_alone() -> None:
    # one timer and, between ticks, one connection: the sweep rides on the visit
    async def main() -> None:
        store = Visited(ManualClock())
        now = [1_000.0]
        sweeps = Scripted([5.0, None, 40.0])
        visit = VisitService(
            store,
            Hooks(),
            tenant="acme",
            queues=["default"],
            served=lambda: 800,
            sweep=sweeps,
            clock=lambda: now[0],
        )
        assert await visit.tick() == 5.0  # visited and swept; the next tick's sweep in 5 s
        assert (store.looks, sweeps.calls) == (1, 1)
        now[0] += 5.0
        until_visit = await visit.tick()  # the tick's sweep alone: no visit
        assert (store.looks, sweeps.calls) == (1, 2)
        assert 75.0 <= until_visit <= 115.0  # the visit's own pace (80 to 120 s) from before
        now[0] += until_visit
        assert await visit.tick() == 40.0  # the visit, with a sweep
        assert (store.looks, sweeps.calls) == (2, 3)
        await store.close()

    asyncio.run(main())


class Flaky(Rescues):
    """Its database can be taken away: every visit then fails at its first question."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.away = False

    async def lease_end(self) -> float | None:
        if self.away:
            raise StoreError("the database is away")
        return await super().lease_end()


def test_after_the_database_was_away_a_visit_gives_a_grace_and_rescues_when_it_ends() -> None:
    async def main() -> None:
        clock = ManualClock()
        store = Flaky(clock)
        monotonic = [0.0]
        recorded: list[float] = []

        async def written(timeout: float) -> bool:
            recorded.append(timeout)
            return True

        visit = VisitService(
            store,
            Hooks(),
            tenant="acme",
            queues=["default"],
            served=lambda: 8,
            clock=lambda: monotonic[0],
            recorded=written,
            hold=Hold(30.0),
        )
        await store.job_insert([NewJob(name="t.work")])
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="cut-off", lease_seconds=30)
        )
        store.away = True
        with pytest.raises(StoreError):
            await visit.tick()
        clock.advance(seconds=60)  # the lease ran out while the database was away
        store.away = False
        # it answers: the visit's first write gives the holder a lease from now, no rescue
        back = await visit.tick()
        assert back <= 30.0 + AFTER_LEASE_SECONDS  # back by the grace's end (or at its pace)
        assert store.rescues == 0 and recorded == []
        held = await store.job_get(job.id)
        assert held is not None and held.lease_until == clock.now() + timedelta(seconds=30)
        clock.advance(seconds=30.0 + AFTER_LEASE_SECONDS)
        monotonic[0] = 30.0 + AFTER_LEASE_SECONDS
        await visit.tick()
        assert store.rescues == 1 and recorded
        rescued = await store.job_get(job.id)
        assert rescued is not None and rescued.state == "retryable"
        await store.close()

    asyncio.run(main())


def test_after_the_first_a_visit_wakes_the_queues_with_a_job_due_and_the_others_later() -> None:
    # an idle tenant's visit is one statement: no queue claims only to find nothing
    async def main() -> None:
        clock = ManualClock()
        store = Visited(clock)
        queues = ["default", "mail", "reports", "idle"]
        visit = VisitService(store, Hooks(), tenant="acme", queues=queues, served=lambda: 8)
        await visit.tick()
        assert store.woken == [tuple(queues)]  # the first visit: their first claims
        await store.job_insert(
            [
                NewJob(name="t.work", queue="mail"),  # enqueued with no hint
                NewJob(name="t.work", queue="reports", run_at=clock.now() + timedelta(hours=1)),
                NewJob(name="t.work", queue="reports", run_at=clock.now() + timedelta(hours=2)),
            ]
        )
        await visit.tick()
        assert store.woken[1:] == [("mail",)]
        assert store.woken_in == {"reports": pytest.approx(3_600.0)}  # its earliest job
        await store.close()

    asyncio.run(main())


def test_a_visit_prunes_once_the_interval_passed_and_again_while_batches_come_back_full() -> None:
    # the prune rides on the visit's connection: an idle tenant opens none of its own for it
    async def main() -> None:
        store = Visited(ManualClock())
        now = [0.0]
        pruner = Scripted([True, False, False])
        visit = VisitService(
            store,
            Hooks(),
            tenant="acme",
            queues=["default"],
            served=lambda: 8,
            prune=pruner,
            clock=lambda: now[0],
        )
        await visit.tick()
        assert pruner.calls == 0  # not before a random part of its interval (150 to 300 s)
        now[0] = 300.0
        await visit.tick()
        assert pruner.calls == 1  # a full batch: more is left
        now[0] = 330.0
        await visit.tick()
        assert pruner.calls == 2  # the next visit prunes again; this batch was the last
        now[0] = 360.0
        await visit.tick()
        assert pruner.calls == 2  # then only an interval later
        now[0] = 630.0
        await visit.tick()
        assert pruner.calls == 3
        await store.close()

    asyncio.run(main())
