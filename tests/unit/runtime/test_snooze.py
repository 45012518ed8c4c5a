"""Snooze: a handler puts its job off without spending an attempt, and the history says so."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ket import Snooze, define_deployment, define_job, define_module
from ket.testing import create_test_deployment

runs: list[int] = []


async def raises(ctx: Any, input: Any) -> None:
    runs.append(ctx.job.attempt)
    if len(runs) < 3:
        raise Snooze(30, reason="stock not in yet")


def returns(ctx: Any, input: Any) -> Snooze | None:  # a plain handler, returning it
    runs.append(ctx.job.attempt)
    return Snooze(5) if len(runs) < 2 else None


async def forever(ctx: Any, input: Any) -> None:
    runs.append(ctx.job.attempt)
    raise Snooze(float("inf"))


APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="shop",
            jobs={
                "raises": define_job(idempotent=True, max_attempts=1, handler=raises),
                "returns": define_job(idempotent=True, max_attempts=1, handler=returns),
                "forever": define_job(idempotent=True, max_attempts=2, handler=forever),
            },
        )
    ],
)


@pytest.fixture(autouse=True)
def fresh_runs() -> None:
    runs.clear()


def test_a_raised_snooze_keeps_the_attempt_and_records_each_snooze() -> None:
    with create_test_deployment(APP) as e2e:
        job_id = e2e.enqueue("shop.raises").id
        assert e2e.drain_jobs() == 0
        [job] = e2e.jobs()
        assert (job.state, job.attempt) == ("scheduled", 0)
        assert job.run_at == e2e.clock.now() + timedelta(seconds=30)
        e2e.clock.advance(seconds=29)
        assert e2e.drain_jobs() == 0 and runs == [1]  # not due before its 30 s
        e2e.clock.advance(seconds=1)
        assert e2e.drain_jobs() == 0
        e2e.clock.advance(seconds=30)
        assert e2e.drain_jobs() == 1  # max_attempts=1, yet it ran three times
        [job] = e2e.jobs()
        assert (job.id, job.state, job.attempt, runs) == (job_id, "completed", 1, [1, 1, 1])
        assert [(e.attempt, e.error, e.traceback) for e in job.errors] == [
            (1, "snoozed for 30 s: stock not in yet", None),
            (1, "snoozed for 30 s: stock not in yet", None),
        ]


def test_a_plain_handler_may_return_a_snooze() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("shop.returns")
        assert e2e.drain_jobs() == 0
        [job] = e2e.jobs()
        assert (job.state, job.attempt, [e.error for e in job.errors]) == (
            "scheduled",
            0,
            ["snoozed for 5 s"],
        )
        e2e.clock.advance(seconds=5)
        assert e2e.drain_jobs() == 1
        assert runs == [1, 1]


def test_a_snooze_no_one_can_wait_for_is_a_failure_of_the_attempt() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("shop.forever")
        assert e2e.drain_jobs() == 0
        [job] = e2e.jobs()
        assert (job.state, job.attempt) == ("retryable", 1)
        assert job.errors[0].error == (
            "Snooze(seconds=...) from shop.forever must be a finite, non-negative number of "
            "seconds, got inf"
        )


def test_a_negative_snooze_is_refused_where_it_is_made() -> None:
    with pytest.raises(ValueError, match="Snooze seconds must not be negative, got -1"):
        Snooze(-1)
