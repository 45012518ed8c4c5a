"""The rescue, prune, schedule sweep and tenant refresh services, one `tick()` at a time on the
memory store with the manual clock: no loop, no real sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import KetError, StoreError
from ket.operate import Actor, run_schedule_now
from ket.runtime.events import Event, Hooks
from ket.runtime.fleet import Fleet, TenantRefresh
from ket.runtime.prune import PruneService
from ket.runtime.rescue import Hold, RescueService
from ket.runtime.sweep import SweepService
from ket.runtime.visit import VISITS_PER_SECOND
from ket.store import Heartbeat, JobClaim, JobQuery, Lease, NewJob, Settle
from ket.store.clock import ManualClock
from ket.store.contract import JobStore
from ket.store.memory import MemoryStore
from ket.transport import CaptureSender


async def noop(ctx: Any, input: Any) -> None:
    return None


MODULE = define_module(
    name="t",
    jobs={
        "work": define_job(idempotent=True, handler=noop),
        "tick": define_job(idempotent=True, schedule={"every": "1m"}, handler=noop),
    },
)
CATALOG = Catalog.build(
    define_deployment(name="t", modules=[MODULE], worker={"queues": {"default": 2}})
)
START = datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)


def ticking(schedule: dict[str, str], **worker: int) -> Catalog:
    """A catalog of one scheduled job `t.tick` (and `worker` settings besides one queue)."""
    job = define_job(idempotent=True, schedule=schedule, handler=noop)
    module = define_module(name="t", jobs={"tick": job})
    settings = {"queues": {"default": 2}, **worker}
    return Catalog.build(define_deployment(name="t", modules=[module], worker=settings))


def run(scenario: Callable[[MemoryStore, ManualClock, list[Event]], Awaitable[None]]) -> None:
    async def main() -> None:
        clock = ManualClock(START)
        store = MemoryStore(clock=clock)
        hooks = Hooks()
        events: list[Event] = []
        hooks.subscribe(events.append)
        try:
            await scenario(store, clock, events)
        finally:
            await store.close()

    asyncio.run(main())


def hooks_of(events: list[Event]) -> Hooks:
    hooks = Hooks()
    hooks.subscribe(events.append)
    return hooks


def test_rescue_tick_moves_an_expired_lease_to_retryable_and_reports_it() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.job_insert([NewJob(name="t.work")])
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="gone", lease_seconds=30)
        )
        service = RescueService(store, hooks_of(events), tenant="acme", interval=30)
        await service.tick()
        assert (await store.job_get(job.id)).state == "executing"  # type: ignore[union-attr]
        clock.advance(seconds=31)
        await service.tick()
        assert (await store.job_get(job.id)).state == "retryable"  # type: ignore[union-attr]
        assert [(e.kind, e.job_id, e.tenant) for e in events] == [("rescued", job.id, "acme")]
        assert "lease of gone expired" in (events[0].detail or "")

    run(scenario)


def test_prune_tick_deletes_finished_jobs_past_retention_only() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.job_insert([NewJob(name="t.work") for _ in range(3)])
        claimed = await store.job_claim(
            JobClaim(queue="default", limit=2, worker_id="w", lease_seconds=30)
        )
        await store.job_settle(
            [Settle(id=j.id, fence=j.fence, outcome="completed") for j in claimed]
        )
        service = PruneService(store, retention_ms={"completed": 3_600_000})
        clock.advance(seconds=3_599)
        await service.tick()
        assert len(await store.job_list(JobQuery())) == 3
        clock.advance(seconds=2)
        await service.tick()
        left = await store.job_list(JobQuery())
        assert [record.state for record in left] == ["available"]

    run(scenario)


def test_prune_tick_keeps_each_finished_state_for_its_own_retention() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.job_insert([NewJob(name="t.work") for _ in range(3)])
        claimed = await store.job_claim(
            JobClaim(queue="default", limit=3, worker_id="w", lease_seconds=30)
        )
        outcomes = ["completed", "discarded", "cancelled"]
        await store.job_settle(
            [
                Settle(id=j.id, fence=j.fence, outcome=outcome)  # type: ignore[arg-type]
                for j, outcome in zip(claimed, outcomes, strict=True)
            ]
        )
        retention = {"completed": 60_000, "discarded": 3_600_000, "cancelled": None}
        service = PruneService(store, retention_ms=retention)  # type: ignore[arg-type]
        clock.advance(seconds=61)
        await service.tick()
        assert sorted(r.state for r in await store.job_list(JobQuery())) == [
            "cancelled",
            "discarded",
        ]
        clock.advance(days=365)
        await service.tick()
        assert [r.state for r in await store.job_list(JobQuery())] == ["cancelled"]

    run(scenario)


def test_sweep_tick_installs_then_fires_each_tick_once() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        service = SweepService(store, CATALOG, hooks_of(events), tenant="acme")
        await service.tick()  # installed in this tick: does not fire for it
        assert await store.job_list(JobQuery(names=("t.tick",))) == []
        clock.advance(seconds=60)
        await service.tick()
        await service.tick()  # the same tick again: nothing more
        [fired] = await store.job_list(JobQuery(names=("t.tick",)))
        assert fired.state == "available"
        assert [e.kind for e in events] == ["schedule_fired"]
        assert service.interval == CATALOG.worker.schedule_sweep_ms / 1000

    run(scenario)


def test_a_paused_schedule_fires_nothing_and_once_resumed_counts_its_ticks_as_skipped() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        service = SweepService(store, CATALOG, hooks_of(events), tenant="acme")
        await service.tick()  # installed
        assert await store.schedule_pause("t.tick", True)
        clock.advance(minutes=3)
        await service.tick()
        assert await store.job_list(JobQuery(names=("t.tick",))) == []
        assert await store.schedule_pause("t.tick", False)
        await service.tick()
        [fired] = await store.job_list(JobQuery(names=("t.tick",)))
        assert (fired.tick, fired.ticks_skipped) == (
            CATALOG.jobs["t.tick"].schedule.tick_at(clock.now()),  # type: ignore[union-attr]
            2,
        )
        # the event says so too, for hooks and the ket_schedule_ticks_skipped_total counter
        assert [(e.kind, e.name, e.skipped) for e in events] == [("schedule_fired", "t.tick", 2)]

    run(scenario)


async def next_sweep(service: SweepService) -> float:
    """Sweep once: the seconds until `service` sweeps again, where the test expects it to
    (None, the visits seeing to it, fails the test)."""
    seconds = await service.tick()
    assert seconds is not None, "no sweep of its own before the next visit"
    return seconds


def test_the_sweep_comes_back_at_the_next_tick_not_a_sweep_interval_later() -> None:
    fast = Catalog.build(
        define_deployment(
            name="t",
            modules=[
                define_module(
                    name="t",
                    jobs={
                        "tick": define_job(
                            idempotent=True, schedule={"every": "10s"}, handler=noop
                        ),
                        "hourly": define_job(
                            idempotent=True, schedule={"every": "1h"}, handler=noop
                        ),
                    },
                )
            ],
        )
    )

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        service = SweepService(store, fast, hooks_of(events), tenant="acme")
        clock.advance(seconds=3)  # 12:00:33: the next 10 s tick is 7 s away
        due = await next_sweep(service)
        assert due == pytest.approx(7.0, abs=0.05)
        clock.advance(seconds=due)
        await service.tick()  # at the tick: it fires
        assert [e.name for e in events] == ["t.tick"]
        # with only schedules whose ticks are far off, it still sweeps within its interval
        assert await store.schedule_pause("t.tick", True)
        due = await next_sweep(service)
        assert service.interval / 2 <= due <= service.interval

    run(scenario)


async def sweep_offsets(store: MemoryStore, catalog: Catalog, tenants: int) -> list[float]:
    """At 12:00:40, with a tick due at 12:01:00: when each of `tenants` tenants of a fleet of
    1,000 sweeps after that tick."""
    offsets = []
    for n in range(tenants):
        service = SweepService(store, catalog, Hooks(), tenant=f"t{n:04}", fleet=lambda: 1_000)
        offsets.append(await next_sweep(service) - 20.0)
    return offsets


def test_many_tenants_sweep_at_their_own_offsets_after_a_tick_within_half_its_period() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        clock.advance(seconds=10)  # 12:00:40: the next 1m tick is 20 s away
        offsets = await sweep_offsets(store, CATALOG, 200)
        assert await sweep_offsets(store, CATALOG, 200) == pytest.approx(offsets)  # fixed
        # a thousand tenants at 50 sweeps a second: over 20 s, within half the 1m period
        assert max(offsets) <= 20.0 and min(offsets) >= 0.0
        assert max(offsets) - min(offsets) > 15.0  # spread, not at one instant

    run(scenario)


def test_a_tenant_with_no_schedule_is_swept_without_a_database_call() -> None:
    plain = Catalog.build(
        define_deployment(
            name="t",
            modules=[
                define_module(name="t", jobs={"work": define_job(idempotent=True, handler=noop)})
            ],
        )
    )

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.close()  # any call would fail now
        service = SweepService(store, plain, hooks_of(events), tenant="acme")
        due = await next_sweep(service)
        assert service.interval / 2 <= due <= service.interval

    run(scenario)


OPERATOR = Actor(subject="ada", source="cli")


def test_run_now_fires_the_schedule_s_job_at_once_and_leaves_its_ticks_alone() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        service = SweepService(store, CATALOG, hooks_of(events), tenant="acme")
        await service.tick()  # installed
        before = await store.schedule_get(["t.tick"])
        inserted = await run_schedule_now(store, CATALOG, "t.tick", OPERATOR, tenant="acme")
        [job] = await store.job_list(JobQuery(names=("t.tick",)))
        assert (job.id, job.tick, job.ticks_skipped) == (inserted.id, clock.now(), 0)
        assert await store.schedule_get(["t.tick"]) == before
        [fire] = await store.schedule_fires("t.tick")
        assert (fire.job_id, fire.skipped) == (inserted.id, 0)
        with pytest.raises(KetError, match=r"no scheduled job 't\.work' in deployment"):
            await run_schedule_now(store, CATALOG, "t.work", OPERATOR, tenant="acme")

    run(scenario)


class _Registry:
    def __init__(self) -> None:
        self.tenants: dict[str, str | None] = {"acme": None, "globex": None}
        self.broken = False

    async def list(self) -> dict[str, str | None]:
        if self.broken:
            raise StoreError("database error: terminating connection due to administrator command")
        return dict(self.tenants)


def test_tenant_refresh_follows_the_registry_and_keeps_its_tenants_when_it_fails() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        registry = _Registry()
        opened: list[str] = []

        async def open_store(url: str) -> JobStore:
            opened.append(url)
            return MemoryStore(clock=clock)

        fleet = Fleet(
            catalog=CATALOG,
            template="sqlite:///tenants/{tenant}.db",  # never opened: open_store is a fake
            list_tenants=registry.list,
            open_store=open_store,
            worker_id="w",
            sender=CaptureSender(),
            hooks=Hooks(),
        )
        refresh = TenantRefresh(fleet)
        try:
            await refresh.tick()
            assert sorted(fleet.workers) == ["acme", "globex"]
            registry.broken = True
            with pytest.raises(StoreError):  # the supervisor logs it and ticks again later
                await refresh.tick()
            assert sorted(fleet.workers) == ["acme", "globex"]  # nobody stopped meanwhile
            registry.broken = False
            del registry.tenants["globex"]
            await refresh.tick()
            assert sorted(fleet.workers) == ["acme"]
            assert opened == ["sqlite:///tenants/acme.db", "sqlite:///tenants/globex.db"]
        finally:
            for name in list(fleet.workers):
                await fleet.workers[name].stop(grace_seconds=0)
                del fleet.workers[name]

    run(scenario)


def test_a_short_period_spreads_the_sweeps_over_half_of_it_not_onto_its_last_instant() -> None:
    """A thousand tenants at 50 sweeps a second would take 20 s; an `every: 30s` schedule
    leaves 15 s. The sweeps spread evenly over those 15 s: capping each offset at 15 s would
    have a quarter of the tenants sweep at that one instant, and the application's jobs of that
    moment wait behind them."""
    thirty = ticking({"every": "30s"})

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        clock.advance(seconds=10)  # 12:00:40: the next 30 s tick is 20 s away
        offsets = await sweep_offsets(store, thirty, 400)
        assert max(offsets) <= 15.0 and min(offsets) >= 0.0
        at_the_end = sum(1 for offset in offsets if offset > 14.9)
        assert at_the_end < len(offsets) * 0.03  # about 1 % of them in its last 0.1 s

    run(scenario)


def test_a_process_of_many_tenants_sweeps_between_ticks_as_seldom_as_it_visits() -> None:
    """With no tick due soon, one tenant is swept again within `schedule_sweep_ms`; a process
    of a thousand tenants sweeps each about every `1000 / VISITS_PER_SECOND` seconds (8 sweeps a
    second in all, not 40), but never past the next tick."""
    hourly = ticking({"every": "1h"})

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        alone = SweepService(store, hourly, hooks_of(events), tenant="acme")
        assert alone.interval / 2 <= await next_sweep(alone) <= alone.interval
        many = SweepService(store, hourly, hooks_of(events), tenant="acme", served=lambda: 1_000)
        longest = 1_000 / VISITS_PER_SECOND
        assert longest > 2 * many.interval
        assert longest / 2 <= await next_sweep(many) <= longest
        clock.advance(seconds=3_600 - 30 - 60)  # 12:59:00: the next tick is 60 s away
        assert 60.0 <= await next_sweep(many) <= 60.0 + 1_000 / 50

    run(scenario)


def test_a_short_sweep_interval_is_kept_by_a_process_of_few_tenants() -> None:
    """`schedule_sweep_ms` of 1 s: a resumed schedule is seen within a second, not at the
    visits' 30 s floor."""
    quick = ticking({"every": "1m"}, schedule_sweep_ms=1_000)

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        assert await store.schedule_pause("t.tick", True)
        service = SweepService(store, quick, hooks_of(events), tenant="acme", served=lambda: 5)
        assert 0.5 <= await next_sweep(service) <= 1.0

    run(scenario)


def test_a_sweep_its_safety_visits_also_make_sleeps_until_the_next_tick() -> None:
    """A tenant woken by hints is swept between ticks by its visits: its own sweep comes only
    at ticks, unless `schedule_sweep_ms` asks for sooner than the visits come."""
    hourly = ticking({"every": "1h"})
    quick = ticking({"every": "1h"}, schedule_sweep_ms=1_000)

    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        visited = SweepService(store, hourly, hooks_of(events), tenant="acme", between_ticks=False)
        # 12:00:30: the next tick is at 13:00, and its sweep within a second of it
        assert 3_570.0 <= await next_sweep(visited) <= 3_571.0
        assert await store.schedule_pause("t.tick", True)
        assert await visited.tick() is None  # nothing ticks: the visits see to a resume
        # however many tenants: past 240 the visits come more seldom than schedule_sweep_ms
        # (a process of 250 swept on its own besides, 8 more connections a second)
        many = SweepService(
            store, hourly, hooks_of(events), tenant="acme", served=lambda: 250, between_ticks=False
        )
        assert await many.tick() is None
        kept = SweepService(store, quick, hooks_of(events), tenant="acme", between_ticks=False)
        assert 0.5 <= await next_sweep(kept) <= 1.0

    run(scenario)


class FullDisk:
    """A memory store whose writes can fail while its reads answer, as SQLite's on a full disk."""

    def __init__(self, store: MemoryStore) -> None:
        self.memory = store
        self.full = False

    def _write(self) -> None:
        if self.full:
            raise StoreError("database error: OperationalError: database or disk is full")

    async def now(self) -> datetime:
        return await self.memory.now()

    async def job_rescue(self, limit: int = 1_000) -> Any:
        self._write()
        return await self.memory.job_rescue(limit)

    async def job_grace(self, seconds: float) -> int:
        self._write()
        return await self.memory.job_grace(seconds)


def test_after_writes_failed_the_rescuer_s_first_write_is_a_grace_of_a_lease() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.job_insert([NewJob(name="t.work") for _ in range(2)])
        live, dead = await store.job_claim(
            JobClaim(queue="default", limit=2, worker_id="cut-off", lease_seconds=30)
        )
        disk = FullDisk(store)
        asked: list[float] = []

        async def recorded(timeout: float) -> bool:  # nothing of this worker's waits
            asked.append(timeout)
            return True

        service = RescueService(
            disk,  # type: ignore[arg-type]
            hooks_of(events),
            tenant="acme",
            interval=30,
            recorded=recorded,
            hold=Hold(30.0),
        )
        disk.full = True
        for _ in range(3):  # reads answer and no outcome of its own waits: still no rescue
            with pytest.raises(StoreError):
                await service.tick()
            clock.advance(seconds=30)  # the leases run out while writes fail
        asked.clear()
        disk.full = False
        await service.tick()  # its first write: a grace, measured from now
        assert events == [] and asked == []
        for job in (live, dead):
            record = await store.job_get(job.id)
            assert record is not None and record.lease_until == clock.now() + timedelta(seconds=30)
        clock.advance(seconds=10)
        beat = Heartbeat(leases=[Lease(id=live.id, fence=live.fence)], lease_seconds=30)
        assert (await store.job_heartbeat(beat)).extended == (live.id,)  # its holder is alive
        clock.advance(seconds=20.001)
        await service.tick()  # the grace is over: only the silent holder's job is rescued
        assert [(e.kind, e.job_id) for e in events] == [("rescued", dead.id)]
        assert asked  # its own outcomes were asked for first
        assert (await store.job_get(live.id)).state == "executing"  # type: ignore[union-attr]

    run(scenario)


def test_a_hold_refuses_a_grace_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="a hold's seconds must be positive, got 0"):
        Hold(0)


def test_a_rescue_whose_outcomes_cannot_be_recorded_is_put_off() -> None:
    async def scenario(store: MemoryStore, clock: ManualClock, events: list[Event]) -> None:
        await store.job_insert([NewJob(name="t.work")])
        await store.job_claim(JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30))
        clock.advance(seconds=31)

        async def never(timeout: float) -> bool:
            return False

        service = RescueService(store, hooks_of(events), tenant="acme", interval=30, recorded=never)
        await service.tick()
        assert events == []  # nothing rescued ahead of this worker's own outcomes

    run(scenario)
