"""`ket migrate`, `ket tenants` and `ket worker` as an operator runs them, on embedded SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

from ket.store import NewJob
from ket.store.sql import SqlStore

from ..processes import terminated
from .conftest import Project, run_ket

APP = """
import asyncio
import json
from ket import define_deployment, define_job, define_module

async def ping(ctx, input):
    ctx.log.info("ping", n=input.n)

async def slow(ctx, input):
    ctx.log.info("slow started")
    await asyncio.sleep(60)   # ignores its signal: shutdown must hand it back anyway

app = define_module(name="app", jobs={
    "ping": define_job(idempotent=True, input={"n": "int"}, handler=ping),
    "slow": define_job(idempotent=True, handler=slow),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 4}, "shutdown_grace_ms": 300, "poll_min_ms": 10},
)
"""


def _enqueue(root: Path, tenant: str, jobs: list[NewJob]) -> None:
    async def insert() -> None:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / tenant}.db")
        try:
            await store.job_insert(jobs)
        finally:
            await store.close()

    asyncio.run(insert())


def _states(root: Path, tenant: str) -> dict[tuple[str, str], int]:
    with sqlite3.connect(root / ".ket" / f"{tenant}.db") as connection:
        rows = connection.execute(
            "SELECT name, state, count(*) FROM ket_jobs GROUP BY name, state"
        ).fetchall()
    return {(name, state): count for name, state, count in rows}


def _worker(root: Path) -> subprocess.Popen[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    return subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _wait_for(predicate: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def test_migrate_installs_every_tenant_and_is_idempotent(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    first = run_ket("migrate", cwd=root)
    assert first.code == 0, first.err
    every = ", ".join(str(n) for n in range(1, 16))
    assert first.out == f"tenant default: applied migrations [{every}]\n"
    again = run_ket("migrate", cwd=root)
    assert again.out == "tenant default: up to date\n"


def test_tenants_are_added_listed_removed_and_migrated_each(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("tenants", "add", "acme", cwd=root).code == 0
    assert run_ket("tenants", "add", "globex", cwd=root).code == 0
    duplicate = run_ket("tenants", "add", "acme", cwd=root)
    assert duplicate.code == 2
    assert "tenant 'acme' is already registered" in duplicate.err
    bad = run_ket("tenants", "add", "Bad Name", cwd=root)
    assert bad.code == 2
    assert "tenant name 'Bad Name'" in bad.err
    listed = run_ket("tenants", "list", cwd=root)
    assert [line.split("\t")[0] for line in listed.out.splitlines()] == ["acme", "globex"]
    migrated = run_ket("migrate", cwd=root)
    assert migrated.out.splitlines() == [
        "tenant acme: applied migrations [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]",
        "tenant globex: applied migrations [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]",
    ]
    assert (root / ".ket" / "acme.db").is_file()
    assert run_ket("tenants", "remove", "globex", cwd=root).code == 0
    gone = run_ket("tenants", "remove", "globex", cwd=root)
    assert gone.code == 2
    assert "tenant 'globex' is not registered" in gone.err


def test_worker_runs_jobs_then_stops_gracefully_on_sigterm(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "default", [NewJob(name="app.ping", payload={"n": n}) for n in range(50)])
    _enqueue(root, "default", [NewJob(name="app.slow")])
    worker = _worker(root)
    try:
        _wait_for(lambda: _states(root, "default").get(("app.ping", "completed")) == 50)
        _wait_for(lambda: _states(root, "default").get(("app.slow", "executing")) == 1)
        started = time.monotonic()
        output = terminated(worker)
    finally:
        worker.kill()
    assert worker.returncode == 0, output
    assert time.monotonic() - started < 10
    assert "received SIGTERM" in output
    assert "worker stopped" in output
    # the job that ignored its signal was handed back at once, its attempt not counted
    with sqlite3.connect(root / ".ket" / "default.db") as connection:
        row = connection.execute(
            "SELECT state, attempt FROM ket_jobs WHERE name = 'app.slow'"
        ).fetchone()
    assert row == ("available", 0)


def test_a_second_signal_exits_at_once(project: Project) -> None:
    root = project({"app/workspace.py": APP.replace("300", "30000")})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "default", [NewJob(name="app.slow")])
    worker = _worker(root)
    output = _Lines(worker)
    try:
        # its handler running, not only claimed (a job claimed but not started when the first
        # signal comes is handed back at once, and the worker stops before a second one)
        _wait_for(lambda: "slow started" in output.text())
        worker.send_signal(signal.SIGTERM)
        # the second signal once the first was taken (not both in one read of the loop)
        _wait_for(lambda: "received SIGTERM: finishing running jobs" in output.text())
        second = time.monotonic()
        worker.send_signal(signal.SIGINT)
        worker.wait(timeout=10)
        exited_after = time.monotonic() - second
    finally:
        worker.kill()
        output.close()
    assert worker.returncode == 1, output.text()
    assert "second signal: handing back running jobs and exiting" in output.text()
    assert exited_after < 5, f"the second signal took {exited_after:.1f}s to end the process"
    # handed back at once, not left executing until its lease expires: the next worker runs it
    assert _states(root, "default") == {("app.slow", "available"): 1}


LEAKY = """
import threading
import time
from ket import define_deployment, define_job, define_module

def forget(ctx, input):
    # a thread left behind that never ends: the interpreter would wait for it at exit
    threading.Thread(target=time.sleep, args=(3600,), name="left-behind").start()

app = define_module(name="app", jobs={"forget": define_job(idempotent=True, handler=forget)})
main = define_deployment(name="main", modules=[app], worker={"queues": {"default": 1}})
"""


def test_a_thread_a_handler_left_running_does_not_keep_a_stopped_worker_alive(
    project: Project,
) -> None:
    root = project({"app/workspace.py": LEAKY})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "default", [NewJob(name="app.forget")])
    worker = _worker(root)
    try:
        _wait_for(lambda: _states(root, "default") == {("app.forget", "completed"): 1})
        output = terminated(worker)
    finally:
        worker.kill()
    assert worker.returncode == 0, output
    assert "worker stopped" in output
    assert "still not exited 10 s after the worker stopped, waiting for threads" in output
    assert "'left-behind'" in output, output
    assert 'File "' in output and "in forget" not in output  # every thread's stack, where it waits


class _Lines:
    """What a process prints, read as it comes (a thread), so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self._stream = process.stdout
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.append(line)

    def text(self) -> str:
        return "".join(self._lines)

    def close(self) -> None:
        """After the process ended: the rest of its output read, the pipe closed."""
        self._reader.join(timeout=10)
        self._stream.close()


def test_worker_refuses_to_start_on_declaration_errors(project: Project) -> None:
    root = project(
        {"app/workspace.py": APP.replace("idempotent=True, handler=slow", "handler=slow")}
    )
    result = run_ket("worker", cwd=root)
    assert result.code == 1
    assert "KET101" in result.err


def test_operator_commands_list_show_retry_cancel_prune_and_stats(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "default", [NewJob(name="app.ping", payload={"n": n}) for n in range(3)])
    listed = run_ket("jobs", "list", "--format", "json", cwd=root)
    assert listed.code == 0, listed.err
    rows = json.loads(listed.out)
    assert [(r["id"], r["state"], r["name"]) for r in rows] == [
        (3, "available", "app.ping"),
        (2, "available", "app.ping"),
        (1, "available", "app.ping"),
    ]
    shown = run_ket("jobs", "show", "2", cwd=root)
    assert 'payload:      {"n": 1}' in shown.out
    missing = run_ket("jobs", "show", "99", cwd=root)
    assert (missing.code, missing.err) == (1, "ket: no job 99\n")
    cancelled = run_ket("jobs", "cancel", "2", cwd=root)
    assert (cancelled.code, cancelled.out) == (0, "job 2: available -> cancelled\n")
    again = run_ket("jobs", "cancel", "2", cwd=root)
    assert (again.code, again.err) == (1, "ket: job 2: already cancelled\n")
    refused = run_ket("jobs", "retry", "1", cwd=root)
    assert refused.code == 1
    assert "only retryable or discarded jobs can be retried, not available" in refused.err
    stats = json.loads(run_ket("jobs", "stats", "--format", "json", cwd=root).out)
    assert stats["counts"] == [
        {"count": 2, "queue": "default", "state": "available"},
        {"count": 1, "queue": "default", "state": "cancelled"},
    ]
    kept = run_ket("jobs", "prune", cwd=root)  # the deployment's retention: a week
    assert (kept.code, kept.out) == (0, "pruned 0 finished jobs\n"), kept.err
    pruned = run_ket("jobs", "prune", "--older-than", "0s", cwd=root)
    assert pruned.out == "pruned 1 finished jobs\n"
    bad = run_ket("jobs", "prune", "--older-than", "a week", cwd=root)
    assert bad.code == 2
    assert "expected a duration such as 12h or 30d, got 'a week'" in bad.err


def test_operator_commands_of_a_multi_tenant_app_require_a_tenant(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    for name in ("acme", "globex"):
        assert run_ket("tenants", "add", name, cwd=root).code == 0
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "acme", [NewJob(name="app.ping", payload={"n": 1})])
    ambiguous = run_ket("jobs", "list", cwd=root)
    assert ambiguous.code == 2
    assert "several tenants (acme, globex); choose one with --tenant" in ambiguous.err
    acme = json.loads(run_ket("jobs", "list", "--tenant", "acme", "--format", "json", cwd=root).out)
    globex = json.loads(
        run_ket("jobs", "list", "--tenant", "globex", "--format", "json", cwd=root).out
    )
    assert ([r["name"] for r in acme], globex) == (["app.ping"], [])
    unknown = run_ket("jobs", "list", "--tenant", "initech", cwd=root)
    assert unknown.code == 2
    assert "tenant 'initech' is not registered" in unknown.err


def test_worker_refuses_an_unknown_tenant(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("tenants", "add", "acme", cwd=root).code == 0
    result = run_ket("worker", "--tenant", "initech", cwd=root)
    assert result.code == 2
    assert "tenant 'initech' is not registered" in result.err


def test_an_unmigrated_database_says_to_run_migrate(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("jobs", "list", cwd=root)
    assert result.code == 2
    assert "it has no ket tables yet; run `ket migrate`" in result.err


def test_a_bad_sqlite_synchronous_level_is_refused_naming_it(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    url = "sqlite:///.ket/{tenant}.db?synchronous=fast"
    result = run_ket("migrate", "--database-url", url, cwd=root)
    assert result.code == 2
    assert "synchronous must be one of off, normal, full, extra, got 'fast'" in result.err
    assert "Traceback" not in result.err


def test_stats_of_all_tenants_list_each_the_sickest_first(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    for tenant in ("acme", "globex", "initech"):
        assert run_ket("tenants", "add", tenant, cwd=root).code == 0
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, "globex", [NewJob(name="app.ping", payload={"n": n}) for n in range(3)])
    _enqueue(root, "initech", [NewJob(name="app.ping", payload={"n": 9})])
    listed = run_ket("jobs", "stats", "--all-tenants", "--sort", "backlog", cwd=root)
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split() == [
        "TENANT",
        "available",
        "scheduled",
        "executing",
        "retryable",
        "discarded",
        "oldest",
        "avail",
        "discarded",
        "1h",
        "workers",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["globex", "initech", "acme"]
    assert lines[1].split()[1:6] == ["3", "0", "0", "0", "0"]
    assert lines[1].split()[-2:] == ["0", "0"]  # nothing discarded, no worker running
    as_json = json.loads(
        run_ket("jobs", "stats", "--all-tenants", "--format", "json", cwd=root).out
    )
    assert [(row["tenant"], row["counts"]["available"]) for row in as_json] == [
        ("acme", 0),
        ("globex", 3),
        ("initech", 1),
    ]
    assert {row["problem"] for row in as_json} == {None}
    both = run_ket("jobs", "stats", "--all-tenants", "--tenant", "acme", cwd=root)
    assert both.code == 2 and "--all-tenants lists every tenant: leave out --tenant" in both.err
