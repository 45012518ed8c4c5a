"""`ket schedules` as an operator runs it, on the embedded default."""

from __future__ import annotations

import json

from tests.acceptance.conftest import Project, run_ket

WORKSPACE = """
from ket import define_deployment, define_job, define_module

def audit(ctx, input):
    pass

def work(ctx, input):
    pass

app = define_module(
    name="ops",
    jobs={
        "audit": define_job(idempotent=True, schedule={"every": "1h"}, handler=audit),
        "work": define_job(idempotent=True, handler=work),
    },
)
main = define_deployment(name="main", modules=[app])
"""


def test_schedules_are_listed_paused_and_fired_now(project: Project) -> None:
    root = project({"app/workspace.py": WORKSPACE})
    assert run_ket("migrate", cwd=root).code == 0
    paused = run_ket("schedules", "pause", "ops.audit", cwd=root)
    assert (paused.code, paused.out) == (0, "schedule ops.audit paused\n"), paused.err
    again = run_ket("schedules", "pause", "ops.audit", cwd=root)
    assert (again.code, again.out) == (0, "schedule ops.audit was already paused\n")
    fired = run_ket("schedules", "run-now", "ops.audit", "--format", "json", cwd=root)
    assert fired.code == 0, fired.err
    job_id = json.loads(fired.out)["job_id"]
    resumed = run_ket("schedules", "resume", "ops.audit", "--format", "json", cwd=root)
    assert json.loads(resumed.out) == {"job": "ops.audit", "paused": False, "changed": True}
    assert run_ket("schedules", "pause", "ops.audit", cwd=root).code == 0
    listed = run_ket("schedules", "list", "--format", "json", cwd=root)
    [row] = json.loads(listed.out)
    assert (row["job"], row["schedule"], row["paused"], row["installed"]) == (
        "ops.audit",
        "every 1h",
        True,
        False,  # no worker has swept yet
    )
    assert (row["last_fire"]["job_id"], row["last_fire"]["skipped"]) == (job_id, 0)
    shown = json.loads(run_ket("jobs", "show", str(job_id), "--format", "json", cwd=root).out)
    assert (shown["name"], shown["ticks_skipped"]) == ("ops.audit", 0)
    assert shown["tick"] == row["last_fire"]["tick"]
    unknown = run_ket("schedules", "resume", "ops.work", cwd=root)
    assert unknown.code == 2
    assert unknown.err == (
        "ket: error: no scheduled job 'ops.work' in deployment 'main' (ops.audit)\n"
    )
