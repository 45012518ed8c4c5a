"""`ket worker --concurrency QUEUE=N` and KET_WORKER_CONCURRENCY as an operator uses them: a real
worker process runs as many jobs of a queue at once as the host says, and bad settings are one
line and exit 2 before anything starts."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ket.store import NewJob
from ket.store.sql import SqlStore

from .conftest import Project, run_ket

# Jobs hold until the test drops a release file. Async handlers share the worker's one event loop,
# so the lines of `events` land in the order the jobs really started and ended.
APP = """
import asyncio
from pathlib import Path
from ket import define_deployment, define_job, define_module

EVENTS = Path(__file__).resolve().parents[1] / "events"
RELEASE = EVENTS.with_name("release")

async def hold(ctx, input):
    with EVENTS.open("a") as events:
        events.write(f"start {ctx.job.id}\\n")
    while not RELEASE.exists():
        await asyncio.sleep(0.01)
    with EVENTS.open("a") as events:
        events.write(f"end {ctx.job.id}\\n")

app = define_module(name="app", jobs={
    "hold": define_job(idempotent=True, timeout_ms=120_000, handler=hold),
    "notify": define_job(idempotent=True, queue="mail", handler=hold),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 2, "mail": 1}, "poll_min_ms": 10, "shutdown_grace_ms": 300},
)
"""
JOBS = 9
MALFORMED = [
    ("default", "--concurrency 'default': expected QUEUE=N, such as default=50"),
    ("=5", "--concurrency '=5': expected QUEUE=N, such as default=50"),
    (
        "default=x",
        "--concurrency 'default=x': N must be a whole number from 1 to 1000, or 0 for a queue "
        "this host does not serve; got 'x'",
    ),
    (
        "default=1001",
        "--concurrency 'default=1001': N must be a whole number from 1 to 1000, or 0 for a queue "
        "this host does not serve; got 1001",
    ),
    (
        "reports=3",
        "--concurrency 'reports=3': queue 'reports' is not declared (declared: default, mail)",
    ),
]


def _environment(extra: dict[str, str]) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    return {**environment, **extra}


def _enqueue(root: Path, count: int) -> None:
    async def insert() -> None:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            await store.job_insert([NewJob(name="app.hold") for _ in range(count)])
        finally:
            await store.close()

    asyncio.run(insert())


def _completed(root: Path) -> int:
    with sqlite3.connect(root / ".ket" / "default.db") as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
        ).fetchone()
    return int(count)


def _overlaps(root: Path) -> list[int]:
    """How many jobs were running after each event, in order."""
    path = root / "events"
    running, seen = 0, []
    for line in path.read_text().splitlines() if path.exists() else []:
        running += 1 if line.startswith("start ") else -1
        seen.append(running)
    return seen


def _wait_for(predicate: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in time: {what()}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("command", "flags", "variable", "expected", "line"),
    [
        (
            "worker",
            ["--concurrency", "default=4"],
            None,
            4,
            "queues default=4 (--concurrency), mail=1 (declared); tenant databases on SQLite",
        ),
        (
            "worker",
            [],
            "default=1",
            1,
            "queues default=1 (KET_WORKER_CONCURRENCY), mail=1 (declared); "
            "tenant databases on SQLite",
        ),
        (
            "worker",
            ["--concurrency", "default=3"],
            "default=1,mail=2",
            3,
            "queues default=3 (--concurrency), mail=2 (KET_WORKER_CONCURRENCY); "
            "tenant databases on SQLite",
        ),
        (
            "dev",
            ["--concurrency", "default=3"],
            None,
            3,
            "queues default=3 (--concurrency), mail=1 (declared); tenant databases on SQLite",
        ),
    ],
    ids=["flag-raises", "variable-lowers", "flag-wins-over-variable", "dev"],
)
def test_a_worker_runs_as_many_jobs_at_once_as_this_host_says(
    project: Project,
    command: str,
    flags: list[str],
    variable: str | None,
    expected: int,
    line: str,
) -> None:
    # declared: default 2. Raised, the test waits for more than 2 to run at once; lowered, the
    # first claim would take 2 at once if the setting were ignored.
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, JOBS)
    extra = {} if variable is None else {"KET_WORKER_CONCURRENCY": variable}
    log = (root / "worker.log").open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", command, *flags],
        cwd=root,
        env=_environment(extra),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = (root / "worker.log").read_text
        _wait_for(lambda: max(_overlaps(root), default=0) >= expected, output)
        (root / "release").touch()
        _wait_for(lambda: _completed(root) == JOBS, output)
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=30)
    finally:
        worker.kill()
        log.close()
    assert worker.returncode == 0, output()
    assert max(_overlaps(root)) == expected
    assert line in output()


@pytest.mark.parametrize(("value", "message"), MALFORMED, ids=[v for v, _ in MALFORMED])
def test_a_bad_flag_exits_2_with_one_line_naming_it(
    project: Project, value: str, message: str
) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("worker", "--concurrency", "mail=1", "--concurrency", value, cwd=root)
    assert (result.code, result.err) == (2, f"ket: error: {message}\n")


def test_a_queue_named_twice_exits_2() -> None:
    result = run_ket("worker", "--concurrency", "default=5", "--concurrency", "default=6")
    assert (result.code, result.err) == (
        2,
        "ket: error: --concurrency names queue 'default' twice ('default=5' and 'default=6'); "
        "give each queue once\n",
    )


def test_a_bad_variable_exits_2_with_one_line_naming_it(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("worker", cwd=root, env={"KET_WORKER_CONCURRENCY": "default=5,mail=many"})
    assert (result.code, result.err) == (
        2,
        "ket: error: KET_WORKER_CONCURRENCY 'mail=many': N must be a whole number from 1 to "
        "1000, or 0 for a queue this host does not serve; got 'many'\n",
    )


def test_dev_refuses_a_bad_setting_before_it_migrates_anything(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("dev", "--concurrency", "reports=3", cwd=root)
    assert (result.code, result.err) == (
        2,
        "ket: error: --concurrency 'reports=3': queue 'reports' is not declared "
        "(declared: default, mail)\n",
    )
    assert not (root / ".ket" / "default.db").exists()
