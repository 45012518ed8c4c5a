"""Recording outcomes: one batch normally, row by row when a batch fails; a row that cannot be
written is discarded with the reason, and a store that is away gets every outcome back."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import StoreError
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks
from ket.runtime.flag import Flag
from ket.runtime.runner import JobRunner, Result
from ket.runtime.settler import RETRY_AT_MOST_SECONDS, Settler, record
from ket.runtime.supervisor import Repeats, Supervisor
from ket.store import ManualClock
from ket.store.memory import MemoryStore
from ket.store.types import ClaimedJob, ErrorInfo, JobClaim, JobRecord, NewJob, Settle, SettleResult
from ket.transport import CaptureSender

LEASE = 30.0
POISON = "<poison>"


async def noop(ctx: Any, input: Any) -> None:
    pass


CATALOG = Catalog.build(
    define_deployment(
        name="test",
        modules=[define_module(name="t", jobs={"job": define_job(idempotent=True, handler=noop)})],
    )
)


class FlakyStore:
    """A memory store whose job_settle raises on demand: for any batch holding a settlement
    whose error text carries the POISON marker, or for everything while `away`."""

    def __init__(self, store: MemoryStore) -> None:
        self.memory = store
        self.away = False
        self.batches: list[list[int]] = []

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        self.batches.append([s.id for s in settlements])
        if self.away:
            raise StoreError("the database is away")
        if any(s.error is not None and POISON in s.error.error for s in settlements):
            raise StoreError("the database refused a row")
        return await self.memory.job_settle(settlements)


class Setup:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.memory = MemoryStore(clock=self.clock)
        self.store = FlakyStore(self.memory)
        self.reports: list[tuple[Result, bool]] = []
        self.repeats = Repeats()

    def report(self, result: Result, applied: bool) -> None:
        self.reports.append((result, applied))

    async def record(
        self, results: list[Result], report: Callable[[Result, bool], None] | None = None
    ) -> list[Result]:
        return await record(
            self.store,  # type: ignore[arg-type]
            results,
            report or self.report,
            self.repeats,
        )

    async def claim(self, count: int = 1, worker: str = "w1") -> list[ClaimedJob]:
        if count:
            await self.memory.job_insert([NewJob(name="t.job") for _ in range(count)])
        return await self.memory.job_claim(
            JobClaim(queue="default", limit=max(count, 1), worker_id=worker, lease_seconds=LEASE)
        )

    async def stale(self) -> ClaimedJob:
        """A job this worker claimed, whose lease expired and another worker holds now."""
        [job] = await self.claim()
        self.clock.advance(seconds=LEASE + 1)
        await self.memory.job_rescue()
        [taken] = await self.claim(0, worker="w2")
        assert taken.fence != job.fence
        return job

    async def get(self, job: ClaimedJob) -> JobRecord:
        record = await self.memory.job_get(job.id)
        assert record is not None
        return record


def completed(job: ClaimedJob) -> Result:
    settle = Settle(id=job.id, fence=job.fence, outcome="completed")
    return Result(job=job, settle=settle, kind="completed")


def failed(job: ClaimedJob, error: str) -> Result:
    info = ErrorInfo(error=error)
    settle = Settle(id=job.id, fence=job.fence, outcome="retryable", delay_seconds=5, error=info)
    return Result(job=job, settle=settle, kind="failed", error=error)


def run(scenario: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        setup = Setup()
        try:
            await scenario(setup)
        finally:
            await setup.memory.close()

    asyncio.run(main())


def test_a_batch_is_recorded_in_one_call_and_every_result_reported_applied() -> None:
    async def scenario(s: Setup) -> None:
        jobs = await s.claim(3)
        results = [completed(job) for job in jobs]
        assert await s.record(results) == []
        assert s.store.batches == [[job.id for job in jobs]]
        assert [(await s.get(job)).state for job in jobs] == ["completed"] * 3
        assert s.reports == [(result, True) for result in results]

    run(scenario)


def test_a_poison_row_is_discarded_with_the_reason_and_the_other_rows_are_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        first, poison, last = await s.claim(3)
        results = [completed(first), failed(poison, f"boom {POISON}"), completed(last)]
        assert await s.record(results) == []
        assert (await s.get(first)).state == "completed"
        assert (await s.get(last)).state == "completed"
        discarded = await s.get(poison)
        reason = (
            "its retryable outcome could not be recorded "
            "(StoreError: the database refused a row); discarded"
        )
        assert discarded.state == "discarded"
        assert [e.error for e in discarded.errors] == [reason]
        assert [(r.job.id, r.kind, r.error, applied) for r, applied in s.reports] == [
            (first.id, "completed", None, True),
            (poison.id, "discarded", reason, True),
            (last.id, "completed", None, True),
        ]
        assert f"job {poison.id} (t.job): {reason}" in caplog.text
        assert "recording outcomes failed: the database refused a row" in caplog.text

    run(scenario)


def test_a_poison_row_does_not_hold_up_a_batch_of_many() -> None:
    async def scenario(s: Setup) -> None:
        jobs = await s.claim(20)
        results = [completed(job) for job in jobs]
        results[7] = failed(jobs[7], POISON)
        assert await s.record(results) == []
        states = [(await s.get(job)).state for job in jobs]
        assert states == ["completed"] * 7 + ["discarded"] + ["completed"] * 12

    run(scenario)


def test_a_store_that_raises_for_everything_gets_every_result_back_and_reports_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        jobs = await s.claim(3)
        results = [completed(jobs[0]), failed(jobs[1], "boom"), completed(jobs[2])]
        s.store.away = True
        assert await s.record(results) == results
        assert s.reports == []
        assert [(await s.get(job)).state for job in jobs] == ["executing"] * 3
        assert "recording outcomes failed: the database is away" in caplog.text

    run(scenario)


def test_results_handed_back_by_a_store_that_was_away_are_recorded_when_it_answers() -> None:
    async def scenario(s: Setup) -> None:
        jobs = await s.claim(2)
        s.store.away = True
        waiting = await s.record([completed(job) for job in jobs])
        s.store.away = False
        assert await s.record(waiting) == []
        assert [(await s.get(job)).state for job in jobs] == ["completed"] * 2
        assert [applied for _, applied in s.reports] == [True, True]

    run(scenario)


def test_refused_settlements_are_reported_as_lease_lost(tmp_path: Path) -> None:
    async def scenario(s: Setup) -> None:
        hooks = Hooks()
        events: list[Event] = []
        hooks.subscribe(events.append)
        contexts = Contexts(
            store=s.memory,
            catalog=CATALOG,
            tenant="acme",
            sender=CaptureSender(),
            storage_root=tmp_path,
        )
        with ThreadPoolExecutor(1) as executor:
            runner = JobRunner(
                catalog=CATALOG, contexts=contexts, executor=executor, hooks=hooks, tenant="acme"
            )
            stale = await s.stale()
            [fresh] = await s.claim()
            assert await s.record([completed(stale), completed(fresh)], runner.report) == []
        assert [(e.kind, e.job_id) for e in events] == [
            ("lease_lost", stale.id),
            ("completed", fresh.id),
        ]
        assert events[0].error == (
            "its completed outcome was refused: another worker holds the job now"
        )
        assert (await s.get(stale)).state == "executing"  # the other worker's attempt

    run(scenario)


def test_a_refused_settlement_in_a_row_by_row_retry_is_reported_unapplied() -> None:
    async def scenario(s: Setup) -> None:
        stale = await s.stale()
        [poison] = await s.claim()
        assert await s.record([completed(stale), failed(poison, POISON)]) == []
        assert [(r.job.id, r.kind, applied) for r, applied in s.reports] == [
            (stale.id, "completed", False),
            (poison.id, "discarded", True),
        ]

    run(scenario)


def test_a_result_with_nothing_to_settle_is_reported_unapplied_without_the_store() -> None:
    async def scenario(s: Setup) -> None:
        [job] = await s.claim()
        lost = Result(job=job, settle=None, kind="lease_lost", error="lease lost")
        assert await s.record([lost]) == []
        assert s.store.batches == []
        assert s.reports == [(lost, False)]

    run(scenario)


def test_the_settler_records_what_was_put_before_it_closes() -> None:
    async def scenario(s: Setup) -> None:
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(s.store, s.report, supervisor)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        jobs = await s.claim(3)
        for job in jobs:
            settler.put(completed(job))
        await settler.close(timeout=5)
        assert running.done()
        assert [(await s.get(job)).state for job in jobs] == ["completed"] * 3
        assert [r.job.id for r, _ in s.reports] == [job.id for job in jobs]

    run(scenario)


def test_the_settler_gives_up_at_shutdown_when_the_store_stays_away(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(s.store, s.report, supervisor)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        [job] = await s.claim()
        s.store.away = True
        settler.put(completed(job))
        await settler.close(timeout=0.1)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert s.reports == []
        assert "giving up recording 1 outcomes at shutdown" in caplog.text

    run(scenario)


def test_the_settler_counts_only_outcomes_when_it_gives_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(s.store, s.report, supervisor)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        [job] = await s.claim()
        s.store.away = True
        settler.put(completed(job))
        await asyncio.sleep(0.02)  # the first try failed: the settler backs off
        await settler.close(timeout=0.05)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert "giving up recording 1 outcomes at shutdown" in caplog.text

    run(scenario)


def test_outcomes_held_through_a_long_outage_are_recorded_within_a_second_of_its_end() -> None:
    async def scenario(s: Setup) -> None:
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(s.store, s.report, supervisor)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        [job] = await s.claim()
        s.store.away = True
        settler.put(completed(job))
        await asyncio.sleep(3.5)  # long enough for a doubling backoff to pass 1.6 s
        failures = len(s.store.batches)
        assert failures >= 6, s.store.batches  # it kept trying (each round: batch, row, discard)
        s.store.away = False
        back = time.monotonic()
        while not s.reports and time.monotonic() - back < 5:
            await asyncio.sleep(0.01)
        assert time.monotonic() - back <= RETRY_AT_MOST_SECONDS + 0.1
        assert (await s.get(job)).state == "completed"
        await settler.close(timeout=1)
        await running

    run(scenario)


def test_recorded_waits_for_the_outcomes_put_before_it_and_retries_at_once() -> None:
    async def scenario(s: Setup) -> None:
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(s.store, s.report, supervisor)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        assert await settler.recorded(0.0)  # nothing waits
        [job] = await s.claim()
        s.store.away = True
        settler.put(completed(job))
        assert not await settler.recorded(0.3)  # the store is away: not recorded
        await asyncio.sleep(0.7)  # the settler now pauses before its next try
        s.store.away = False
        asked = time.monotonic()
        assert await settler.recorded(2.0)
        assert time.monotonic() - asked < 0.3  # tried again at once, not after its pause
        assert (await s.get(job)).state == "completed"
        await settler.close(timeout=1)
        await running

    run(scenario)


class Silent(FlakyStore):
    """Its first write never answers, as on a connection the network dropped without a word."""

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        if not self.batches:
            self.batches.append([s.id for s in settlements])
            await asyncio.Event().wait()
        return await super().job_settle(settlements)


def test_a_write_that_never_answers_is_abandoned_and_tried_again() -> None:
    async def scenario(s: Setup) -> None:
        store = Silent(s.memory)
        supervisor = Supervisor(tenant="acme", stopping=Flag())
        settler = Settler(store, s.report, supervisor, timeout=0.2)  # type: ignore[arg-type]
        running = asyncio.ensure_future(settler.run())
        [job] = await s.claim()
        settler.put(completed(job))
        assert await settler.recorded(2.0)
        assert len(store.batches) == 2  # the silent write, then one that answered
        assert (await s.get(job)).state == "completed"
        await settler.close(timeout=1)
        await running

    run(scenario)
