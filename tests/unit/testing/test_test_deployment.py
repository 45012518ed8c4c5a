"""create_test_deployment itself: the clock drives due times, retries and DST schedule ticks;
PostgreSQL via database_url."""

from __future__ import annotations

from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.testing import create_test_deployment

runs: list[tuple[str, int, Any]] = []


async def flaky(ctx: Any, input: Any) -> None:
    runs.append(("flaky", ctx.job.attempt, ctx.now()))
    if ctx.job.attempt == 1:
        raise RuntimeError("first try fails")


async def nightly(ctx: Any, input: Any) -> None:
    runs.append(("nightly", ctx.schedule.skipped, ctx.schedule.tick))


left_behind: ContextVar[str | None] = ContextVar("left_behind", default=None)


async def sets_a_context_variable(ctx: Any, input: Any) -> None:
    runs.append(("sets", ctx.job.id, left_behind.get()))
    left_behind.set(f"set by job {ctx.job.id}")


def _deployment(at: str) -> Any:
    module = define_module(
        name="t",
        jobs={
            "flaky": define_job(idempotent=True, backoff=lambda attempt: 60, handler=flaky),
            "nightly": define_job(
                idempotent=True,
                schedule={"daily_at": at, "timezone": "America/New_York"},
                handler=nightly,
            ),
            "sets": define_job(idempotent=True, handler=sets_a_context_variable),
        },
    )
    return define_deployment(name="t", modules=[module])


def utc(year: int, month: int, day: int, hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def test_a_failed_job_runs_again_only_when_the_clock_reaches_its_retry() -> None:
    runs.clear()
    with create_test_deployment(_deployment("02:30")) as e2e:
        e2e.enqueue("t.flaky")
        assert e2e.drain_jobs() == 0
        [job] = e2e.jobs()
        assert (job.state, job.attempt, [e.error for e in job.errors]) == (
            "retryable",
            1,
            ["RuntimeError: first try fails"],
        )
        e2e.clock.advance(seconds=59)
        assert e2e.drain_jobs() == 0
        e2e.clock.advance(seconds=1)
        assert e2e.drain_jobs() == 1
        assert [(name, attempt) for name, attempt, _ in runs] == [("flaky", 1), ("flaky", 2)]
        assert runs[1][2] - runs[0][2] == e2e.clock.now() - runs[0][2]


def test_a_daily_time_in_the_spring_forward_gap_fires_at_the_end_of_the_gap() -> None:
    runs.clear()
    with create_test_deployment(_deployment("02:30")) as e2e:
        e2e.clock.set(utc(2025, 3, 8, 12, 0))
        assert e2e.run_schedules() == 0  # installed
        e2e.clock.set(utc(2025, 3, 9, 6, 59, 59))  # 01:59:59 EST, just before the gap
        assert e2e.run_schedules() == 0
        e2e.clock.set(utc(2025, 3, 9, 7, 0))  # 03:00 EDT: 02:30 did not exist today
        assert e2e.run_schedules() == 1
        e2e.clock.set(utc(2025, 3, 10, 6, 30))  # 02:30 EDT the next day
        assert e2e.run_schedules() == 1
        e2e.drain_jobs()
        assert runs == [
            ("nightly", 0, utc(2025, 3, 9, 7, 0)),
            ("nightly", 0, utc(2025, 3, 10, 6, 30)),
        ]


def test_a_daily_time_in_the_fall_back_overlap_fires_once_at_its_first_occurrence() -> None:
    runs.clear()
    with create_test_deployment(_deployment("01:30")) as e2e:
        e2e.clock.set(utc(2025, 11, 1, 12, 0))
        e2e.run_schedules()
        e2e.clock.set(utc(2025, 11, 2, 5, 30))  # 01:30 EDT, the first occurrence
        assert e2e.run_schedules() == 1
        e2e.clock.set(utc(2025, 11, 2, 6, 30))  # 01:30 EST, the same wall time again
        assert e2e.run_schedules() == 0
        e2e.drain_jobs()
        assert runs == [("nightly", 0, utc(2025, 11, 2, 5, 30))]


def test_worker_false_refuses_schedules_too() -> None:
    from ket.testing import WorkerDisabled

    with (
        create_test_deployment(_deployment("02:30"), worker=False) as e2e,
        pytest.raises(WorkerDisabled),
    ):
        e2e.run_schedules()


def test_database_url_runs_the_same_helpers_on_postgresql(
    postgres_url: str, postgres_schema: str
) -> None:
    runs.clear()
    url = f"{postgres_url}?options=-csearch_path%3D{postgres_schema}"
    with create_test_deployment(_deployment("02:30"), database_url=url) as e2e:
        e2e.enqueue("t.flaky")
        e2e.drain_jobs()
        e2e.clock.advance(minutes=1)
        assert e2e.drain_jobs() == 1
        assert [job.state for job in e2e.jobs()] == ["completed"]


def test_drain_discards_rows_of_a_job_the_deployment_no_longer_declares() -> None:
    from ket.store import NewJob

    with create_test_deployment(_deployment("02:30")) as e2e:
        e2e._loop.run(e2e.store.job_insert([NewJob(name="t.removed")]))
        assert e2e.drain_jobs() == 0
        [job] = e2e.jobs()
        assert (job.state, [e.error for e in job.errors]) == (
            "discarded",
            ["no job 't.removed' in deployment 't'"],
        )


def test_what_a_handler_sets_in_its_context_variables_stays_in_its_attempt() -> None:
    runs.clear()
    with create_test_deployment(_deployment("02:30")) as e2e:
        first, second = e2e.enqueue("t.sets"), e2e.enqueue("t.sets")
        assert e2e.drain_jobs() == 2
        assert runs == [("sets", first.id, None), ("sets", second.id, None)]
