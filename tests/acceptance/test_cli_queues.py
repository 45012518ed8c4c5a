"""`ket queues` as an operator runs it, beside a real `ket worker` on the embedded default: a
paused queue's jobs wait while the other queues run, its running job finishes, and a resume
starts the waiting ones at once; each pause and resume is in the audit log."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.store.types import AuditQuery

from ..processes import terminated
from .conftest import Project, run_ket

APP = """
import asyncio
from ket import define_deployment, define_job, define_module

async def ping(ctx, input):
    pass

async def mail(ctx, input):
    await asyncio.sleep(input.seconds)

app = define_module(name="app", jobs={
    "ping": define_job(idempotent=True, handler=ping),
    "mail": define_job(idempotent=True, queue="mail", input={"seconds": "number"}, handler=mail),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 2, "mail": 2}, "poll_min_ms": 10, "poll_max_ms": 30000},
)
"""


def _database(root: Path) -> Path:
    return root / ".ket" / "default.db"


def _enqueue(root: Path, jobs: list[NewJob]) -> None:
    async def insert() -> None:
        store = await SqlStore.open(f"sqlite:///{_database(root)}")
        try:
            await store.job_insert(jobs)
        finally:
            await store.close()

    asyncio.run(insert())


def _states(root: Path) -> dict[tuple[str, str], int]:
    with sqlite3.connect(_database(root)) as connection:
        rows = connection.execute(
            "SELECT name, state, count(*) FROM ket_jobs GROUP BY name, state"
        ).fetchall()
    return {(name, state): count for name, state, count in rows}


def _wait_for(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> float:
    """Seconds until `predicate` held; AssertionError naming `what` after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout} s")


def _mails(seconds: float, count: int) -> list[NewJob]:
    return [NewJob(name="app.mail", queue="mail", payload={"seconds": seconds})] * count


def test_a_paused_queue_waits_while_the_others_run_and_a_resume_starts_it(
    project: Project,
) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # a mail job running when the queue is paused finishes: a pause is not a cancel
        _enqueue(root, _mails(1.0, 1))
        _wait_for(lambda: _states(root).get(("app.mail", "executing")) == 1, "the running mail")
        paused = run_ket("queues", "pause", "mail", cwd=root)
        assert (paused.code, paused.out) == (
            0,
            "queue mail paused: no worker claims its jobs until it is resumed "
            "(running jobs finish)\n",
        ), paused.err
        _enqueue(root, _mails(0.0, 5))
        _enqueue(root, [NewJob(name="app.ping")] * 5)
        _wait_for(lambda: _states(root).get(("app.ping", "completed")) == 5, "the other queue")
        _wait_for(lambda: _states(root).get(("app.mail", "completed")) == 1, "the running mail")
        time.sleep(1.0)  # the worker had every chance to claim them
        assert _states(root).get(("app.mail", "available")) == 5, _states(root)

        listed = json.loads(run_ket("queues", "list", "--format", "json", cwd=root).out)
        by_name = {row["queue"]: row for row in listed["queues"]}
        assert sorted(by_name) == ["default", "mail"]
        mail = by_name["mail"]
        assert (mail["paused"], mail["available"], mail["executing"]) == (True, 5, 0)
        assert mail["paused_by"].endswith(f"@{os.uname().nodename}")
        assert mail["oldest_available_seconds"] >= 1.0
        assert (by_name["default"]["paused"], by_name["default"]["paused_by"]) == (False, None)
        text = run_ket("queues", "list", cwd=root).out.splitlines()
        assert text[0].split() == [
            "QUEUE",
            "STATE",
            "AVAILABLE",
            "SCHEDULED",
            "EXECUTING",
            "RETRYABLE",
            "OLDEST",
        ]
        assert text[2].split()[:3] == ["mail", "paused", "5"]
        assert text[-1].startswith(f"mail paused by {mail['paused_by']} at ")

        again = run_ket("queues", "pause", "mail", cwd=root)
        assert (again.code, again.out) == (0, "queue mail was already paused\n")

        resumed = run_ket("queues", "resume", "mail", "--format", "json", cwd=root)
        assert json.loads(resumed.out) == {"queue": "mail", "paused": False, "changed": True}
        # woken by the resume, not found by a poll (the worker's idle poll is 30 s here)
        took = _wait_for(
            lambda: _states(root).get(("app.mail", "completed")) == 6, "the resumed mails", 10.0
        )
        print(f"the 5 waiting mails ran {took:.2f} s after the resume command returned")
    finally:
        output = terminated(worker)
    assert worker.returncode == 0, output
    assert " ERROR " not in output, output

    async def audit() -> list[tuple[str, str, int]]:
        store = await SqlStore.open(f"sqlite:///{_database(root)}")
        try:
            entries = await store.audit_list(AuditQuery(limit=10))
        finally:
            await store.close()
        return [
            (e.entry.action, e.entry.selection["queue"], e.entry.changed) for e in reversed(entries)
        ]

    assert asyncio.run(audit()) == [
        ("pause", "mail", 1),
        ("pause", "mail", 0),
        ("resume", "mail", 1),
    ]


def test_an_undeclared_queue_is_refused_naming_the_declared_ones(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    typo = run_ket("queues", "pause", "mial", cwd=root)
    assert typo.code == 2
    assert typo.err == (
        "ket: error: no queue 'mial' in deployment 'main' (queues: default, mail); "
        "did you mean 'mail'?\n"
    )
    assert (
        json.loads(run_ket("queues", "list", "--format", "json", cwd=root).out)["queues"][1][
            "paused"
        ]
        is False
    )
    not_paused = run_ket("queues", "resume", "mail", cwd=root)
    assert (not_paused.code, not_paused.out) == (0, "queue mail was already resumed\n")
    assert run_ket("queues", "resume", "mial", cwd=root).code == 2


def test_a_pause_the_deployment_outlived_is_listed_and_lifted(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0

    async def paused_by_an_older_deployment() -> None:
        store = await SqlStore.open(f"sqlite:///{_database(root)}")
        try:
            await store.queue_pause("retired", paused_by="ops")
        finally:
            await store.close()

    asyncio.run(paused_by_an_older_deployment())
    listed = json.loads(run_ket("queues", "list", "--format", "json", cwd=root).out)["queues"]
    assert [(q["queue"], q["paused"]) for q in listed] == [
        ("default", False),
        ("mail", False),
        ("retired", True),
    ]
    lifted = run_ket("queues", "resume", "retired", cwd=root)
    assert (lifted.code, lifted.out) == (0, "queue retired resumed\n"), lifted.err
    again = run_ket("queues", "pause", "retired", cwd=root)
    assert again.code == 2 and "no queue 'retired'" in again.err


def test_a_database_of_an_older_ket_says_to_migrate_and_is_upgraded_in_place(
    project: Project,
) -> None:
    # a tenant database migrated by the ket before queue pauses (version 7), jobs in it
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, [NewJob(name="app.ping")])
    with sqlite3.connect(_database(root)) as connection:
        connection.execute("DROP TABLE ket_queue_pauses")
        connection.execute("DELETE FROM ket_migrations WHERE version = 8")
    older = run_ket("queues", "pause", "mail", cwd=root)
    assert older.code == 2
    assert older.err.endswith(
        "no such table: ket_queue_pauses: this database's ket tables are older than this "
        "version of ket; run `ket migrate`\n"
    ), older.err
    migrated = run_ket("migrate", cwd=root)
    assert migrated.out == "tenant default: applied migrations [8]\n", migrated.err
    assert run_ket("queues", "pause", "mail", cwd=root).code == 0
    assert _states(root) == {("app.ping", "available"): 1}  # the jobs are still there
