"""Expiry through the per-job step the worker and the test helpers share: a job not started
within `expires_in` of its run time is discarded unstarted; one started in time runs."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.errors import JobRejected
from ket.testing import create_test_deployment

runs: list[str] = []


async def remind(ctx: Any, input: Any) -> None:
    runs.append(input.who)


APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="crm",
            jobs={"remind": define_job(input={"who": "string"}, idempotent=True, handler=remind)},
        )
    ],
)


@pytest.fixture(autouse=True)
def fresh_runs() -> None:
    runs.clear()


def test_a_job_not_started_within_its_expiry_never_runs_and_says_why() -> None:
    with create_test_deployment(APP) as e2e:
        late = e2e.enqueue("crm.remind", {"who": "late"}, expires_in="10m").id
        e2e.clock.advance(minutes=9)
        e2e.enqueue("crm.remind", {"who": "fresh"}, expires_in=600)
        e2e.clock.advance(minutes=2)
        assert e2e.drain_jobs() == 1
        assert runs == ["fresh"]
        [job] = e2e.jobs(state="discarded")
        assert job.id == late and job.attempt == 0
        assert [e.error for e in job.errors] == ["expired"]


def test_a_delayed_job_s_expiry_counts_from_its_run_time() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.enqueue("crm.remind", {"who": "tomorrow"}, run_in="1d", expires_in="10m")
        e2e.clock.advance(days=1, minutes=9)
        assert e2e.drain_jobs() == 1 and runs == ["tomorrow"]


@pytest.mark.parametrize("bad", [0, -1, "soon", "0m"])
def test_an_expiry_that_is_no_duration_above_zero_is_refused_naming_it(bad: object) -> None:
    with create_test_deployment(APP) as e2e:
        with pytest.raises(JobRejected, match=rf"job 'crm.remind': expires_in .*{bad!r}"):
            e2e.enqueue("crm.remind", {"who": "x"}, expires_in=bad)  # type: ignore[arg-type]
        assert e2e.jobs() == []
