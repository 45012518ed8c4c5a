"""`ket worker --burst` as cron or CI runs it: it runs what is due (and what that enqueues), leaves
later work alone, exits 0, or 1 when it discarded a job; on SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ket.store import NewJob
from ket.store.sql import SqlStore
from tests.conftest import migrated_postgres_database

from ..processes import terminated
from .conftest import Project, run_ket

APP = """
import asyncio
from datetime import timedelta
from ket import Discard, define_deployment, define_job, define_module

async def parent(ctx, input):
    await ctx.jobs.enqueue("app.child", {"n": input.n})  # due now: the burst runs it too
    await ctx.jobs.enqueue("app.child", {"n": -input.n}, run_at=ctx.now() + timedelta(hours=1))

async def child(ctx, input):
    ctx.log.info("child", n=input.n)

async def give_up(ctx, input):
    raise Discard("no recipient")

async def slow(ctx, input):
    await asyncio.sleep(60)   # ignores its signal: the stop hands it back

app = define_module(name="app", jobs={
    "parent": define_job(idempotent=True, input={"n": "int"}, effects=["enqueue:app.child"],
                         handler=parent),
    "child": define_job(idempotent=True, queue="mail", input={"n": "int"}, handler=child),
    "give_up": define_job(idempotent=True, handler=give_up),
    "slow": define_job(idempotent=True, handler=slow),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 4, "mail": 2}, "shutdown_grace_ms": 300},
)
"""
LATER = datetime.now(UTC) + timedelta(days=1)


def _backlog(count: int) -> list[NewJob]:
    """`count` parents due now, and a child due tomorrow."""
    jobs = [NewJob(name="app.parent", payload={"n": n}) for n in range(1, count + 1)]
    return [*jobs, NewJob(name="app.child", queue="mail", payload={"n": 0}, run_at=LATER)]


def _enqueue(url: str, jobs: list[NewJob]) -> None:
    async def insert() -> None:
        store = await SqlStore.open(url)
        try:
            await store.job_insert(jobs)
        finally:
            await store.close()

    asyncio.run(insert())


def _sqlite_states(root: Path, tenant: str = "default") -> dict[tuple[str, str], int]:
    with sqlite3.connect(root / ".ket" / f"{tenant}.db") as connection:
        rows = connection.execute("SELECT name, state, count(*) FROM ket_jobs GROUP BY 1, 2")
        return {(name, state): count for name, state, count in rows.fetchall()}


def test_a_burst_runs_what_is_due_and_what_it_enqueues_then_exits_0(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(f"sqlite:///{root / '.ket' / 'default.db'}", _backlog(20))
    started = time.monotonic()
    burst = run_ket("worker", "--burst", cwd=root)
    assert burst.code == 0, burst.err
    assert time.monotonic() - started < 30
    assert _sqlite_states(root) == {
        ("app.parent", "completed"): 20,
        ("app.child", "completed"): 20,
        # due later: the one enqueued before the burst, and each parent's
        ("app.child", "scheduled"): 21,
    }
    assert "burst over: 40 jobs run in 1 tenant (40 completed)" in burst.err
    assert "worker stopped" in burst.err
    again = run_ket("worker", "--burst", cwd=root)
    assert again.code == 0, again.err
    assert "burst over: 0 jobs run in 1 tenant\n" in again.err


def test_a_burst_that_discarded_a_job_exits_1_after_running_the_rest(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(f"sqlite:///{root / '.ket' / 'default.db'}", [NewJob(name="app.give_up")])
    _enqueue(f"sqlite:///{root / '.ket' / 'default.db'}", _backlog(3))
    burst = run_ket("worker", "--burst", cwd=root)
    assert burst.code == 1, burst.err
    states = _sqlite_states(root)
    assert states[("app.give_up", "discarded")] == 1
    assert (states[("app.parent", "completed")], states[("app.child", "completed")]) == (3, 3)
    assert "burst over: 7 jobs run in 1 tenant (6 completed, 1 discarded)" in burst.err


def test_a_burst_serves_every_tenant_or_the_one_named(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    for name in ("acme", "globex"):
        assert run_ket("tenants", "add", name, cwd=root).code == 0
    assert run_ket("migrate", cwd=root).code == 0
    for name in ("acme", "globex"):
        _enqueue(f"sqlite:///{root / '.ket' / name}.db", _backlog(2))
    one = run_ket("worker", "--burst", "--tenant", "acme", cwd=root)
    assert one.code == 0, one.err
    assert _sqlite_states(root, "acme")[("app.child", "completed")] == 2
    assert _sqlite_states(root, "globex") == {
        ("app.parent", "available"): 2,
        ("app.child", "scheduled"): 1,
    }
    every = run_ket("worker", "--burst", cwd=root)
    assert every.code == 0, every.err
    assert _sqlite_states(root, "globex")[("app.child", "completed")] == 2
    assert "burst over: 4 jobs run in 2 tenants (4 completed)" in every.err


def test_a_burst_on_a_database_without_ket_tables_exits_2_saying_to_migrate(
    project: Project,
) -> None:
    root = project({"app/workspace.py": APP})
    burst = run_ket("worker", "--burst", cwd=root)  # never migrated: no ket tables
    assert burst.code == 2, burst.err
    assert "run `ket migrate`" in burst.err
    assert "burst: tenants not drained" in burst.err and "default" in burst.err


def test_sigterm_during_a_burst_hands_running_jobs_back_as_a_worker_does(
    project: Project,
) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(f"sqlite:///{root / '.ket' / 'default.db'}", [NewJob(name="app.slow")])
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    environment["KET_PRESENCE_INTERVAL_S"] = "0.2"
    burst = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker", "--burst"],
        cwd=root,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while _sqlite_states(root) != {("app.slow", "executing"): 1}:
            assert time.monotonic() < deadline, "the burst never started the job"
            time.sleep(0.05)
        # in the roster, its tenants by name: workers that share every tenant never count it
        while (listed := _workers(root)) == []:
            assert time.monotonic() < deadline, "the burst never reported itself"
            time.sleep(0.05)
        assert [worker["tenants"] for worker in listed] == [["default"]]
        output = terminated(burst)
    finally:
        burst.kill()
    assert burst.returncode == 0, output
    assert "received SIGTERM" in output
    with sqlite3.connect(root / ".ket" / "default.db") as connection:
        row = connection.execute("SELECT state, attempt FROM ket_jobs").fetchone()
    assert row == ("available", 0)  # handed back, its attempt not counted
    assert _workers(root) == []  # it left the roster


def _workers(root: Path) -> list[dict[str, Any]]:
    listed = run_ket("workers", "list", "--format", "json", cwd=root)
    assert listed.code == 0, listed.err
    workers: list[dict[str, Any]] = json.loads(listed.out)["workers"]
    return workers


@pytest.fixture
def postgres_database(postgres_url: str) -> Iterator[str]:
    with migrated_postgres_database(postgres_url, "ket_burst") as url:
        yield url


def test_a_burst_on_postgresql_drains_and_says_when_it_discarded(
    project: Project, postgres_database: str
) -> None:
    root = project({"app/workspace.py": APP})
    environment = {
        "KET_DATABASE_URL": postgres_database,
        "KET_REGISTRY_URL": f"sqlite:///{root / 'registry.db'}",  # none: the one tenant
    }
    _enqueue(postgres_database, _backlog(20))
    burst = run_ket("worker", "--burst", cwd=root, env=environment)
    assert burst.code == 0, burst.err
    assert _postgres_states(postgres_database) == {
        ("app.parent", "completed"): 20,
        ("app.child", "completed"): 20,
        ("app.child", "scheduled"): 21,
    }
    _enqueue(postgres_database, [NewJob(name="app.give_up")])
    discarded = run_ket("worker", "--burst", cwd=root, env=environment)
    assert discarded.code == 1, discarded.err
    assert _postgres_states(postgres_database)[("app.give_up", "discarded")] == 1


def _postgres_states(url: str) -> dict[tuple[str, str], int]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT name, state, count(*) FROM ket_jobs GROUP BY 1, 2")
        return {(name, state): count for name, state, count in rows.fetchall()}
