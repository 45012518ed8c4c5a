"""A job's result and progress as an operator meets them: a worker process runs the job, the
completion keeps what its handler returned, and `ket jobs show` prints it, secrets as `***`; a
running job's progress shows once its lease's heartbeat wrote it; on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import migrated_postgres_database

from ..processes import terminated
from .conftest import Project, run_ket

APP = """
import asyncio
from ket import define_deployment, define_job, define_module

def reserve(ctx, input):
    return {"reserved": input.quantity, "warehouse": "north", "pin": "s3cr3t-pin"}

async def forget(ctx, input):
    return {"anything": 1}

async def crunch(ctx, input):
    ctx.progress(0.3, "reading the ledger")
    while not ctx.signal.aborted:
        await asyncio.sleep(0.05)

app = define_module(name="app", jobs={
    "reserve": define_job(
        idempotent=True,
        input={"quantity": "int"},
        output={"reserved": "int", "warehouse": "string", "pin": "secret"},
        handler=reserve,
    ),
    "forget": define_job(idempotent=True, handler=forget),
    "crunch": define_job(idempotent=True, handler=crunch),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 2}, "lease_ms": 3000, "shutdown_grace_ms": 200},
)
"""


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    with migrated_postgres_database(postgres_url, "ket_results") as url:
        yield url


def _run(root: Path, environment: dict[str, str]) -> tuple[str, str]:
    """Enqueue both jobs, drain them with a worker process; `ket jobs show` of each, in JSON."""
    for job, given in (("app.reserve", '{"quantity": 3}'), ("app.forget", "{}")):
        enqueued = run_ket("jobs", "enqueue", job, given, cwd=root, env=environment)
        assert enqueued.code == 0, enqueued.err
    burst = run_ket("worker", "--burst", cwd=root, env=environment)
    assert burst.code == 0, burst.err
    shown = [run_ket("jobs", "show", str(n), cwd=root, env=environment) for n in (1, 2)]
    for one in shown:
        assert one.code == 0, one.err
    return shown[0].out, shown[1].out


def _check(root: Path, environment: dict[str, str]) -> None:
    reserve, forget = _run(root, environment)
    assert 'result:       {"pin": "***", "reserved": 3, "warehouse": "north"}\n' in reserve
    assert "s3cr3t-pin" not in reserve
    assert "result:       -\n" in forget
    as_json = run_ket("jobs", "show", "1", "--format", "json", cwd=root, env=environment)
    assert json.loads(as_json.out)["result"] == {
        "pin": "***",
        "reserved": 3,
        "warehouse": "north",
    }


def test_a_worker_keeps_a_result_and_jobs_show_prints_it_on_sqlite(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _check(root, {})


def test_a_worker_keeps_a_result_and_jobs_show_prints_it_on_postgresql(
    project: Project, postgres_database: str
) -> None:
    root = project({"app/workspace.py": APP})
    environment = {
        "KET_DATABASE_URL": postgres_database,
        "KET_REGISTRY_URL": f"sqlite:///{root / 'registry.db'}",  # none: the one tenant
    }
    _check(root, environment)


def test_a_running_job_s_progress_shows_once_its_heartbeat_wrote_it(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    assert run_ket("jobs", "enqueue", "app.crunch", "{}", cwd=root).code == 0
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env={k: v for k, v in os.environ.items() if not k.startswith("KET_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while True:  # a heartbeat every second (a third of the lease) writes it
            shown = run_ket("jobs", "show", "1", "--format", "json", cwd=root)
            job = json.loads(shown.out) if shown.code == 0 else {}
            if job.get("progress"):
                break
            assert time.monotonic() < deadline, "the progress never showed"
            time.sleep(0.2)
        assert job["state"] == "executing"
        assert job["progress"] == {"fraction": 0.3, "note": "reading the ledger"}
        text = run_ket("jobs", "show", "1", cwd=root).out
        assert "progress:     30% reading the ledger\n" in text
        output = terminated(worker)
    finally:
        worker.kill()
    assert worker.returncode == 0, output
