"""Leases: heartbeats extend them and abort the lost and the cancelled; the guard gives attempts
up before an unconfirmed lease runs out, and claiming resumes when the database answers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

import pytest

from ket.errors import StoreError
from ket.runtime.lease import LEASE_SAFETY_MARGIN, Attempts, HeartbeatService, LeaseGuard
from ket.store import ManualClock
from ket.store.memory import MemoryStore
from ket.store.types import ClaimedJob, Heartbeat, HeartbeatResult, JobClaim, JobQuery, NewJob

LEASE = 30.0


class Monotonic:
    """The worker's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class AwayStore:
    """A memory store whose database can be taken away: every call then raises StoreError."""

    def __init__(self, store: MemoryStore) -> None:
        self.memory = store
        self.away = False

    async def now(self) -> datetime:
        self._check()
        return await self.memory.now()

    async def job_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        self._check()
        return await self.memory.job_heartbeat(heartbeat)

    def _check(self) -> None:
        if self.away:
            raise StoreError("the database is away")


class Setup:
    def __init__(self) -> None:
        self.store_clock = ManualClock()
        self.memory = MemoryStore(clock=self.store_clock)
        self.store = AwayStore(self.memory)
        self.clock = Monotonic()
        self.attempts = Attempts(lease_seconds=LEASE, clock=self.clock)
        self.heartbeat = HeartbeatService(self.store, self.attempts)  # type: ignore[arg-type]
        self.guard = LeaseGuard(self.attempts, tenant="acme")

    async def claim(self, count: int = 1, worker: str = "w1") -> list[ClaimedJob]:
        """Insert `count` new jobs (none: claim what is due) and claim them for `worker`."""
        if count:
            await self.memory.job_insert([NewJob(name="t.job") for _ in range(count)])
        return await self.memory.job_claim(
            JobClaim(queue="default", limit=max(count, 1), worker_id=worker, lease_seconds=LEASE)
        )

    async def start(self, count: int = 1) -> list[ClaimedJob]:
        """Claim `count` jobs now and register them as running attempts."""
        jobs = await self.claim(count)
        for job in jobs:
            self.attempts.add(job, self.clock())
        return jobs


def run(scenario: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        setup = Setup()
        try:
            await scenario(setup)
        finally:
            await setup.memory.close()

    asyncio.run(main())


def test_an_attempt_is_held_for_one_lease_from_the_claims_send_time() -> None:
    async def scenario(s: Setup) -> None:
        s.clock.now = 5.0
        [job] = await s.claim()
        attempt = s.attempts.add(job, sent=2.0)
        assert attempt.held_until == 2.0 + LEASE
        assert list(s.attempts) == [attempt]

    run(scenario)


def test_heartbeat_extends_held_until_from_its_send_time() -> None:
    async def scenario(s: Setup) -> None:
        await s.start()
        s.clock.now = 10.0
        await s.heartbeat.tick()
        [attempt] = s.attempts
        assert attempt.held_until == 10.0 + LEASE
        assert not attempt.signal.aborted

    run(scenario)


def test_heartbeat_interval_is_a_third_of_the_lease() -> None:
    assert HeartbeatService(MemoryStore(), Attempts(lease_seconds=30.0)).interval == 10.0


def test_heartbeat_aborts_an_attempt_whose_lease_was_lost_and_leaves_it_unextended() -> None:
    async def scenario(s: Setup) -> None:
        [lost] = await s.start()
        # its lease expired unseen: the rescuer hands the job to another worker, new fence
        s.store_clock.advance(seconds=LEASE + 1)
        await s.memory.job_rescue()
        [taken] = await s.claim(0, worker="w2")
        assert taken.id == lost.id and taken.fence != lost.fence
        [kept] = await s.start()
        s.clock.now = 10.0
        await s.heartbeat.tick()
        by_id = {a.job.id: a for a in s.attempts}
        assert by_id[lost.id].signal.reason == "lease lost"
        assert by_id[lost.id].held_until == LEASE  # not extended
        assert not by_id[kept.id].signal.aborted
        assert by_id[kept.id].held_until == 10.0 + LEASE

    run(scenario)


def test_heartbeat_aborts_an_attempt_whose_job_an_operator_cancelled() -> None:
    async def scenario(s: Setup) -> None:
        [cancelled, other] = await s.start(2)
        change = await s.memory.job_cancel(cancelled.id)
        assert change.reason == "cancel requested: its worker aborts it"
        await s.heartbeat.tick()
        by_id = {a.job.id: a for a in s.attempts}
        assert by_id[cancelled.id].signal.reason == "cancelled"
        assert not by_id[other.id].signal.aborted

    run(scenario)


def test_heartbeat_skips_attempts_already_given_up_as_lost() -> None:
    async def scenario(s: Setup) -> None:
        await s.start()
        [attempt] = s.attempts
        attempt.signal.abort("lease lost")
        s.clock.now = 10.0
        await s.heartbeat.tick()
        assert attempt.held_until == LEASE  # its lease is not kept alive any more

    run(scenario)


def test_lease_guard_aborts_attempts_within_the_safety_margin_and_pauses_claiming(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        [job] = await s.start()
        s.clock.now = LEASE * (1 - LEASE_SAFETY_MARGIN)  # 22.5 s: 7.5 s of lease left
        await s.guard.tick()
        [attempt] = s.attempts
        assert attempt.signal.reason == "lease lost"
        assert not s.attempts.reachable.is_set()
        assert f"aborted 1 running attempt (job {job.id})" in caplog.text

    run(scenario)


def test_lease_guard_leaves_attempts_not_yet_near_their_deadline_alone() -> None:
    async def scenario(s: Setup) -> None:
        [early] = await s.start()
        s.clock.now = 1.0
        [late] = await s.start()
        s.clock.now = LEASE * (1 - LEASE_SAFETY_MARGIN)  # early is due, late has 1 s more
        await s.guard.tick()
        by_id = {a.job.id: a for a in s.attempts}
        assert by_id[early.id].signal.reason == "lease lost"
        assert not by_id[late.id].signal.aborted

    run(scenario)


def test_lease_guard_does_nothing_while_heartbeats_keep_leases_fresh() -> None:
    async def scenario(s: Setup) -> None:
        await s.start()
        for now in (10.0, 20.0, 30.0, 40.0):
            s.clock.now = now
            await s.heartbeat.tick()
            await s.guard.tick()
        [attempt] = s.attempts
        assert not attempt.signal.aborted
        assert s.attempts.reachable.is_set()

    run(scenario)


def test_claiming_stays_paused_while_the_database_is_still_away() -> None:
    async def scenario(s: Setup) -> None:
        await s.start()
        s.store.away = True
        s.clock.now = 10.0
        with pytest.raises(StoreError):
            await s.heartbeat.tick()
        s.clock.now = 22.5
        await s.guard.tick()
        with pytest.raises(StoreError):
            await s.heartbeat.tick()
        assert not s.attempts.reachable.is_set()

    run(scenario)


def test_a_heartbeat_with_a_working_store_resumes_claiming(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="ket.worker")

    async def scenario(s: Setup) -> None:
        await s.start()
        s.store.away = True
        s.clock.now = 22.5
        await s.guard.tick()
        assert not s.attempts.reachable.is_set()
        s.store.away = False
        await s.heartbeat.tick()
        assert s.attempts.reachable.is_set()
        assert "the database answers again; claiming resumes" in caplog.text

    run(scenario)


def test_lease_guard_ticks_often_enough_to_catch_the_margin() -> None:
    assert LeaseGuard(Attempts(lease_seconds=30.0), tenant="acme").interval == 1.0
    assert LeaseGuard(Attempts(lease_seconds=2.0), tenant="acme").interval == 0.2


def test_the_lease_services_are_watched_only_while_attempts_run_or_claiming_is_paused() -> None:
    async def scenario(s: Setup) -> None:
        watched = s.attempts.watched
        assert not watched.is_set()  # an idle tenant: no heartbeat, guard or vacuum timers
        [job] = await s.start()
        assert watched.is_set()
        s.attempts.remove(job.id)
        assert not watched.is_set()
        [job] = await s.start()
        s.store.away = True
        s.clock.now = 22.5
        await s.guard.tick()  # gives the attempt up and pauses claiming
        s.attempts.remove(job.id)
        assert watched.is_set()  # the heartbeat must go on probing the database
        s.store.away = False
        await s.heartbeat.tick()
        assert s.attempts.reachable.is_set() and not watched.is_set()

    run(scenario)


def test_heartbeat_keeps_the_lease_of_an_attempt_whose_outcome_waits_to_be_recorded() -> None:
    async def scenario(s: Setup) -> None:
        [job] = await s.start()
        s.attempts.finish(job.id)  # over: its outcome is in the settler
        assert list(s.attempts) == [] and s.attempts.watched.is_set()
        s.clock.now = 10.0
        s.store_clock.advance(seconds=10)
        await s.heartbeat.tick()
        assert s.attempts.settling[job.id].held_until == 10.0 + LEASE
        [record] = await s.memory.job_list(JobQuery())
        assert record.lease_until == s.store_clock.now() + timedelta(seconds=LEASE)
        # the lease guard has nothing of it to abort, however long heartbeats fail
        s.store.away = True
        s.clock.now = 100.0
        await s.guard.tick()
        assert s.attempts.reachable.is_set()
        assert not s.attempts.settling[job.id].signal.aborted
        s.attempts.settled(job.id)  # recorded: the lease is no longer kept
        assert not s.attempts.settling and not s.attempts.watched.is_set()

    run(scenario)


def test_a_settling_attempt_whose_lease_was_taken_is_no_longer_heartbeated() -> None:
    async def scenario(s: Setup) -> None:
        [job] = await s.start()
        s.attempts.finish(job.id)
        s.store_clock.advance(seconds=LEASE + 1)
        await s.memory.job_rescue()
        await s.claim(0, worker="w2")
        await s.heartbeat.tick()
        assert job.id not in s.attempts.settling  # its late outcome will be refused anyway

    run(scenario)
