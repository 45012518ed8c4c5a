"""The vacuumer, one `tick()` at a time, against a store that answers as it is told."""

from __future__ import annotations

import asyncio
import itertools
import logging
from datetime import UTC, datetime

import pytest

from ket.runtime.lease import Attempts
from ket.runtime.vacuum import VacuumService
from ket.store import ClaimedJob, Vacuum, Vacuumed, VacuumStore


class ScriptedStore:
    """Answers each job_vacuum with the next of `answers` (the last one repeats)."""

    def __init__(self, *answers: Vacuumed) -> None:
        self.answers = list(answers)
        self.asked: list[Vacuum] = []

    async def job_vacuum(self, vacuum: Vacuum) -> Vacuumed:
        self.asked.append(vacuum)
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


VACUUMED = Vacuumed(outcome="vacuumed", dead_before=20_000, dead_after=300)
HELD = Vacuumed(outcome="vacuumed", dead_before=20_000, dead_after=19_000)
NOT_DUE = Vacuumed(outcome="not_due", dead_before=10)
AT = datetime(2026, 3, 1, tzinfo=UTC)


def claims(attempts: Attempts, count: int) -> None:
    """`count` claims in this worker (each attempt ends at once)."""
    for _ in range(count):
        job = ClaimedJob(
            id=attempts.started + 1,
            name="t.work",
            queue="default",
            payload={},
            payload_version=1,
            priority=0,
            attempt=1,
            max_attempts=3,
            unique_key=None,
            company=None,
            run_at=AT,
            enqueued_at=AT,
            lease_until=AT,
            fence=1,
            tick=None,
            ticks_skipped=None,
        )
        attempts.add(job, 0.0)
        attempts.remove(job.id)


def ticks(service: VacuumService, count: int = 1) -> None:
    async def main() -> None:
        for _ in range(count):
            await service.tick()

    asyncio.run(main())


def test_the_scripted_store_is_a_vacuum_store() -> None:
    assert isinstance(ScriptedStore(NOT_DUE), VacuumStore)


def test_the_store_is_asked_only_after_every_claims_here() -> None:
    store, attempts = ScriptedStore(NOT_DUE), Attempts(lease_seconds=30)
    service = VacuumService(store, attempts, tenant="acme", every=100)
    ticks(service)
    claims(attempts, 99)
    ticks(service, 3)
    assert store.asked == []
    claims(attempts, 1)
    ticks(service, 3)
    assert len(store.asked) == 1
    claims(attempts, 150)
    ticks(service)
    claims(attempts, 49)
    ticks(service)
    assert len(store.asked) == 2  # 150 claims since the last check, then 49 more


def test_the_store_gets_the_vacuum_the_service_was_given() -> None:
    store, attempts = ScriptedStore(NOT_DUE), Attempts(lease_seconds=30)
    vacuum = Vacuum(threshold=5, scale_factor=0.5)
    service = VacuumService(store, attempts, tenant="acme", every=1, vacuum=vacuum)
    claims(attempts, 1)
    ticks(service)
    assert store.asked == [vacuum]


def test_a_role_that_may_not_vacuum_is_told_once_and_the_store_never_asked_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, attempts = ScriptedStore(Vacuumed(outcome="not_permitted")), Attempts(lease_seconds=30)
    service = VacuumService(store, attempts, tenant="acme", every=10)
    caplog.set_level(logging.INFO, logger="ket.worker")
    for _ in range(5):
        claims(attempts, 10)
        ticks(service)
    assert len(store.asked) == 1
    [record] = [r for r in caplog.records if "vacuum" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert "tenant acme" in record.getMessage()
    assert "cannot vacuum ket_jobs" in record.getMessage()


def test_a_database_that_keeps_no_dead_rows_is_never_asked_again() -> None:
    store, attempts = ScriptedStore(Vacuumed(outcome="not_needed")), Attempts(lease_seconds=30)
    service = VacuumService(store, attempts, tenant="acme", every=10)
    for _ in range(5):
        claims(attempts, 10)
        ticks(service)
    assert len(store.asked) == 1


def test_checks_spread_out_while_vacuums_reclaim_little_and_close_in_once_one_does() -> None:
    store = ScriptedStore(HELD, HELD, VACUUMED, NOT_DUE)
    attempts = Attempts(lease_seconds=30)
    service = VacuumService(store, attempts, tenant="acme", every=10)
    asked_at = []
    for _ in range(120):
        claims(attempts, 1)
        before = len(store.asked)
        ticks(service)
        if len(store.asked) > before:
            asked_at.append(attempts.started)
    # held, held: every 10, then 20, then 40 claims; reclaimed: every 10 again
    assert asked_at[:5] == [10, 30, 70, 80, 90]


def test_checks_spread_out_no_further_than_sixty_four_times_every() -> None:
    store, attempts = ScriptedStore(HELD), Attempts(lease_seconds=30)
    service = VacuumService(store, attempts, tenant="acme", every=1)
    asked_at = []
    for _ in range(400):
        claims(attempts, 1)
        before = len(store.asked)
        ticks(service)
        if len(store.asked) > before:
            asked_at.append(attempts.started)
    gaps = [b - a for a, b in itertools.pairwise(asked_at)]
    assert gaps == [2, 4, 8, 16, 32] + [64] * (len(gaps) - 5)
    assert len(gaps) > 7


def test_every_below_one_claim_is_refused() -> None:
    with pytest.raises(ValueError, match="every must be at least 1 claim, got 0"):
        VacuumService(ScriptedStore(NOT_DUE), Attempts(lease_seconds=30), tenant="t", every=0)
