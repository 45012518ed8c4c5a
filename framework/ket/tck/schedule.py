"""Schedules: install, compare-and-set a tick, the fired job and its ledger entry, resets."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from ket.errors import JobRejected
from ket.store.contract import ScheduleControl
from ket.store.types import Fire, Inserted, NewJob, ScheduleState, TickClaim, TickResult
from ket.tck.arrange import assert_no_jobs, claim, claim_only, new_job, queryable
from ket.tck.harness import EPOCH, Tck, tck_test

__all__ = [
    "test_schedule_claim_tick_from_a_missing_row_loses",
    "test_schedule_claim_tick_moves_the_row_and_fires_the_job_with_a_ledger_entry",
    "test_schedule_claim_tick_with_a_rejected_job_writes_nothing",
    "test_schedule_claim_tick_with_a_stale_fingerprint_loses_and_writes_nothing",
    "test_schedule_claim_tick_with_a_stale_tick_loses_and_writes_nothing",
    "test_schedule_fingerprint_change_moves_the_row_without_a_job",
    "test_schedule_fires_are_listed_newest_first_per_schedule",
    "test_schedule_get_returns_only_installed_schedules",
    "test_schedule_install_never_fires",
    "test_schedule_install_wins_once_and_a_second_install_loses",
    "test_schedule_pause_before_the_first_sweep_survives_the_install",
    "test_schedule_pause_is_kept_by_tick_claims_and_resume_clears_it",
    "test_schedule_run_now_fires_a_job_and_a_ledger_entry_without_moving_the_schedule",
    "test_schedule_second_claim_of_the_same_tick_loses",
]

HOURLY = "sales.report@every 1h"
FP_1, FP_2 = "fp-1", "fp-2"


def _tick(hours: int) -> datetime:
    return EPOCH + timedelta(hours=hours)


def _state(fingerprint: str, hours: int, schedule_id: str = HOURLY) -> ScheduleState:
    return ScheduleState(schedule_id=schedule_id, fingerprint=fingerprint, last_tick=_tick(hours))


def _job(hours: int, skipped: int = 0) -> NewJob:
    return new_job("sales.report", tick=_tick(hours), ticks_skipped=skipped)


async def _install(t: Tck, fingerprint: str = FP_1, schedule_id: str = HOURLY) -> ScheduleState:
    claim = TickClaim(
        schedule_id=schedule_id, fingerprint=fingerprint, tick=_tick(0), expected=None
    )
    assert await t.store.schedule_claim_tick(claim) == TickResult(won=True, job=None)
    return _state(fingerprint, 0, schedule_id)


async def _fire(t: Tck, expected: ScheduleState, hours: int, skipped: int = 0) -> TickResult:
    return await t.store.schedule_claim_tick(
        TickClaim(
            schedule_id=expected.schedule_id,
            fingerprint=expected.fingerprint,
            tick=_tick(hours),
            expected=expected,
            skipped=skipped,
            job=_job(hours, skipped),
        )
    )


@tck_test
async def test_schedule_install_wins_once_and_a_second_install_loses(t: Tck) -> None:
    installed = await _install(t)
    second = TickClaim(schedule_id=HOURLY, fingerprint=FP_2, tick=_tick(1), expected=None)
    assert await t.store.schedule_claim_tick(second) == TickResult(won=False, job=None)
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: installed}


@tck_test
async def test_schedule_install_never_fires(t: Tck) -> None:
    install = TickClaim(
        schedule_id=HOURLY, fingerprint=FP_1, tick=_tick(0), expected=None, job=_job(0)
    )
    try:
        result = await t.store.schedule_claim_tick(install)
    except JobRejected:
        pass  # refusing an install that carries a job is one way to never fire it
    else:
        assert result.job is None
    await assert_no_jobs(t)
    assert await queryable(t).schedule_fires(HOURLY) == []


@tck_test
async def test_schedule_claim_tick_moves_the_row_and_fires_the_job_with_a_ledger_entry(
    t: Tck,
) -> None:
    installed = await _install(t)
    t.clock.advance(hours=3, seconds=2)
    result = await _fire(t, installed, hours=3, skipped=2)
    assert result.won is True
    assert result.job is not None and result.job.coalesced is False
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: _state(FP_1, 3)}
    claimed = await claim_only(t.store, result.job.id)
    assert (claimed.name, claimed.tick, claimed.ticks_skipped) == ("sales.report", _tick(3), 2)
    assert await queryable(t).schedule_fires(HOURLY) == [
        Fire(
            schedule_id=HOURLY,
            fingerprint=FP_1,
            tick=_tick(3),
            skipped=2,
            job_id=result.job.id,
            fired_at=t.clock.now(),
        )
    ]


@tck_test
async def test_schedule_second_claim_of_the_same_tick_loses(t: Tck) -> None:
    installed = await _install(t)
    first = await _fire(t, installed, hours=1)
    second = await _fire(t, installed, hours=1)
    assert first.won is True and first.job is not None
    assert second == TickResult(won=False, job=None)
    assert [c.id for c in await claim(t.store)] == [first.job.id]
    assert [f.job_id for f in await queryable(t).schedule_fires(HOURLY)] == [first.job.id]


async def _loses(t: Tck, expected: ScheduleState) -> None:
    assert await _fire(t, expected, hours=2) == TickResult(won=False, job=None)
    assert await claim(t.store) == []
    assert await queryable(t).schedule_fires(HOURLY) == []


@tck_test
async def test_schedule_claim_tick_with_a_stale_tick_loses_and_writes_nothing(t: Tck) -> None:
    installed = await _install(t)
    moved = await t.store.schedule_claim_tick(
        TickClaim(schedule_id=HOURLY, fingerprint=FP_1, tick=_tick(1), expected=installed)
    )
    assert moved.won is True
    await _loses(t, installed)  # the row is at tick 1 now, not at tick 0
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: _state(FP_1, 1)}


@tck_test
async def test_schedule_claim_tick_with_a_stale_fingerprint_loses_and_writes_nothing(
    t: Tck,
) -> None:
    await _install(t, FP_1)
    await _loses(t, _state(FP_2, 0))
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: _state(FP_1, 0)}


@tck_test
async def test_schedule_claim_tick_from_a_missing_row_loses(t: Tck) -> None:
    await _loses(t, _state(FP_1, 0))
    assert await t.store.schedule_get([HOURLY]) == {}


@tck_test
async def test_schedule_claim_tick_with_a_rejected_job_writes_nothing(t: Tck) -> None:
    installed = await _install(t)
    bad = TickClaim(
        schedule_id=HOURLY,
        fingerprint=FP_1,
        tick=_tick(1),
        expected=installed,
        job=new_job("sales.report", priority=5_000),
    )
    try:
        result = await t.store.schedule_claim_tick(bad)
    except JobRejected:
        pass
    else:
        raise AssertionError(f"a tick claim with a job of priority 5000 was accepted: {result}")
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: installed}
    await assert_no_jobs(t)
    assert await queryable(t).schedule_fires(HOURLY) == []


@tck_test
async def test_schedule_fingerprint_change_moves_the_row_without_a_job(t: Tck) -> None:
    installed = await _install(t, FP_1)
    reset = await t.store.schedule_claim_tick(
        TickClaim(schedule_id=HOURLY, fingerprint=FP_2, tick=_tick(5), expected=installed)
    )
    assert reset == TickResult(won=True, job=None)
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: _state(FP_2, 5)}
    await assert_no_jobs(t)
    assert await queryable(t).schedule_fires(HOURLY) == []
    fired = await _fire(t, _state(FP_2, 5), hours=6)
    assert fired.won is True
    assert [(f.fingerprint, f.tick) for f in await queryable(t).schedule_fires(HOURLY)] == [
        (FP_2, _tick(6))
    ]


@tck_test
async def test_schedule_get_returns_only_installed_schedules(t: Tck) -> None:
    daily = "sales.digest@daily 08:00"
    await _install(t, FP_1)
    await _install(t, FP_2, schedule_id=daily)
    assert await t.store.schedule_get([]) == {}
    assert await t.store.schedule_get(["never.installed"]) == {}
    assert await t.store.schedule_get([daily, "never.installed", HOURLY]) == {
        HOURLY: _state(FP_1, 0),
        daily: _state(FP_2, 0, daily),
    }


@tck_test
async def test_schedule_fires_are_listed_newest_first_per_schedule(t: Tck) -> None:
    other = "sales.digest@daily 08:00"
    expected = await _install(t)
    other_state = await _install(t, schedule_id=other)
    jobs: list[Inserted] = []
    for hours in (1, 2, 3):
        t.clock.advance(hours=1)
        result = await _fire(t, expected, hours=hours, skipped=hours - 1)
        assert result.won is True and result.job is not None
        jobs.append(result.job)
        expected = _state(FP_1, hours)
    assert (await _fire(t, other_state, hours=1)).won is True
    fires = await queryable(t).schedule_fires(HOURLY)
    assert [(f.tick, f.skipped, f.job_id) for f in fires] == [
        (_tick(hours), hours - 1, job.id)
        for hours, job in zip((3, 2, 1), reversed(jobs), strict=True)
    ]
    assert [f.fired_at for f in fires] == [_tick(3), _tick(2), _tick(1)]
    assert [f.tick for f in await queryable(t).schedule_fires(HOURLY, limit=2)] == [
        _tick(3),
        _tick(2),
    ]
    assert [f.schedule_id for f in await queryable(t).schedule_fires(other)] == [other]


def _control(t: Tck) -> ScheduleControl:
    return t.require(ScheduleControl)  # type: ignore[type-abstract]


@tck_test
async def test_schedule_pause_is_kept_by_tick_claims_and_resume_clears_it(t: Tck) -> None:
    control = _control(t)
    installed = await _install(t)
    assert await control.schedule_pause(HOURLY, True) is True
    assert await control.schedule_pause(HOURLY, True) is False  # already paused
    [state] = (await t.store.schedule_get([HOURLY])).values()
    assert (state.paused, state.fingerprint, state.last_tick) == (True, FP_1, _tick(0))
    # the sweep leaves a paused schedule alone; a claim that does move the row keeps the pause
    assert (await _fire(t, installed, 1)).won
    [state] = (await t.store.schedule_get([HOURLY])).values()
    assert (state.paused, state.last_tick) == (True, _tick(1))
    assert await control.schedule_pause(HOURLY, False) is True
    assert (await t.store.schedule_get([HOURLY]))[HOURLY].paused is False


@tck_test
async def test_schedule_pause_before_the_first_sweep_survives_the_install(t: Tck) -> None:
    control = _control(t)
    assert await control.schedule_pause(HOURLY, True) is True
    [placeholder] = (await t.store.schedule_get([HOURLY])).values()
    assert placeholder.paused
    assert placeholder.fingerprint != FP_1  # not installed: a sweep resets it to its own
    reset = TickClaim(schedule_id=HOURLY, fingerprint=FP_1, tick=_tick(0), expected=placeholder)
    assert (await t.store.schedule_claim_tick(reset)).won
    state = (await t.store.schedule_get([HOURLY]))[HOURLY]
    assert (state.fingerprint, state.last_tick, state.paused) == (FP_1, _tick(0), True)
    await assert_no_jobs(t)


@tck_test
async def test_schedule_run_now_fires_a_job_and_a_ledger_entry_without_moving_the_schedule(
    t: Tck,
) -> None:
    control = _control(t)
    installed = await _install(t)
    inserted = await control.schedule_run_now(HOURLY, FP_1, _job(5))
    assert inserted == Inserted(id=inserted.id, coalesced=False)
    assert await t.store.schedule_get([HOURLY]) == {HOURLY: installed}  # its ticks go on
    claimed = await claim_only(t.store, inserted.id)
    assert (claimed.name, claimed.tick, claimed.ticks_skipped) == ("sales.report", _tick(5), 0)
    [fire] = await queryable(t).schedule_fires(HOURLY)
    assert (fire.tick, fire.skipped, fire.job_id, fire.fingerprint) == (
        _tick(5),
        0,
        inserted.id,
        FP_1,
    )
    with pytest.raises(JobRejected, match="must carry its tick"):
        await control.schedule_run_now(HOURLY, FP_1, new_job("sales.report"))
