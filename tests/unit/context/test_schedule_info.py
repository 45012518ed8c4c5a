"""`ctx.schedule`: the tick, what was skipped, and the schedule's own recent fires."""

from __future__ import annotations

from typing import Any

from ket import define_deployment, define_job, define_module
from ket.testing import create_test_deployment

seen: dict[str, Any] = {}


async def report(ctx: Any, input: Any) -> None:
    fires = await ctx.schedule.fires(limit=5)
    seen["async"] = [(f.tick, f.skipped, f.job_id) for f in fires]
    seen["tick"] = ctx.schedule.tick


def audit(ctx: Any, input: Any) -> None:  # a plain handler reads them without await
    seen["plain"] = [(f.tick, f.skipped, f.job_id) for f in ctx.schedule.fires()]


APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="ops",
            jobs={
                "report": define_job(idempotent=True, schedule={"every": "1h"}, handler=report),
                "audit": define_job(idempotent=True, schedule={"every": "1h"}, handler=audit),
            },
        )
    ],
)


def test_a_scheduled_job_reads_its_own_schedule_s_recent_fires() -> None:
    with create_test_deployment(APP) as e2e:
        e2e.run_schedules()  # installs
        e2e.clock.advance(hours=1)
        assert e2e.run_schedules() == 2
        assert e2e.drain_jobs() == 2
        e2e.clock.advance(hours=3)
        assert e2e.run_schedules() == 2
        assert e2e.drain_jobs() == 2
        jobs = {j.id: j for j in e2e.jobs(name="ops.report")}
        first, second = sorted(jobs)
        assert seen["async"] == [(jobs[second].tick, 2, second), (jobs[first].tick, 0, first)]
        assert seen["tick"] == seen["async"][0][0]
        assert [(skipped, job_id) for _, skipped, job_id in seen["plain"]] == [
            (2, max(j.id for j in e2e.jobs(name="ops.audit"))),
            (0, min(j.id for j in e2e.jobs(name="ops.audit"))),
        ]
