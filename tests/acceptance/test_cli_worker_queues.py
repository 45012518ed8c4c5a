"""`ket worker --queues` and `--concurrency QUEUE=0` as an operator uses them: a real worker
process serves only the queues it is given and leaves the others' jobs where they are,
`ket workers list` shows what each worker serves and warns of a queue none serves, and bad
values are one line and exit 2 before anything starts."""

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
from typing import Any

import pytest

from ket.store import NewJob
from ket.store.sql import SqlStore
from tests.processes import stop_processes

from .conftest import Project, run_ket

APP = """
from ket import define_deployment, define_job, define_module

def noop(ctx, input):
    pass

app = define_module(name="app", jobs={
    "ship": define_job(idempotent=True, handler=noop),
    "notify": define_job(idempotent=True, queue="mail", handler=noop),
})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 2, "mail": 3}, "poll_min_ms": 10, "shutdown_grace_ms": 300},
)
"""
# the roster is read within a fifth of a second of a worker's start, not five seconds
FAST_PRESENCE = {"KET_PRESENCE_INTERVAL_S": "0.2"}
WARNING = (
    "ket: warning: queue 'default' is served by no live worker; its jobs wait until one serves it\n"
)


def _environment(extra: dict[str, str]) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    return {**environment, **FAST_PRESENCE, **extra}


def _enqueue(root: Path, jobs: list[NewJob]) -> None:
    async def insert() -> None:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            await store.job_insert(jobs)
        finally:
            await store.close()

    asyncio.run(insert())


def _states(root: Path) -> dict[tuple[str, str], int]:
    with sqlite3.connect(root / ".ket" / "default.db") as connection:
        rows = connection.execute("SELECT name, state, count(*) FROM ket_jobs GROUP BY 1, 2")
        return {(name, state): count for name, state, count in rows.fetchall()}


def _wait_for(predicate: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in time: {what()}")
        time.sleep(0.05)


def _workers(root: Path) -> dict[str, Any]:
    listed = run_ket("workers", "list", "--format", "json", cwd=root, env=FAST_PRESENCE)
    assert listed.code == 0, listed.err
    document: dict[str, Any] = json.loads(listed.out)
    return document


def _start(
    root: Path, flags: list[str], extra: dict[str, str], log: str = "worker.log"
) -> subprocess.Popen[str]:
    """`ket worker FLAGS` in the background, its output in `log` (the child keeps the file)."""
    with (root / log).open("w") as output:
        return subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker", *flags],
            cwd=root,
            env=_environment(extra),
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.mark.parametrize(
    ("flags", "extra", "reason"),
    [
        (["--queues", "mail"], {}, "--queues"),
        (["--concurrency", "default=0"], {}, "--concurrency default=0"),
        ([], {"KET_WORKER_QUEUES": "mail"}, "KET_WORKER_QUEUES"),
    ],
    ids=["queues", "concurrency-0", "variable"],
)
def test_a_worker_runs_its_queues_jobs_and_leaves_the_others_available(
    project: Project, flags: list[str], extra: dict[str, str], reason: str
) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, [NewJob(name="app.ship") for _ in range(3)])  # due before the worker starts
    worker = _start(root, flags, extra)
    output = (root / "worker.log").read_text
    try:
        _wait_for(lambda: _workers(root)["workers"] != [], output)
        _enqueue(root, [NewJob(name="app.notify", queue="mail") for _ in range(4)])
        _wait_for(lambda: _states(root).get(("app.notify", "completed")) == 4, output)
        assert _states(root) == {("app.ship", "available"): 3, ("app.notify", "completed"): 4}

        listed = run_ket("workers", "list", cwd=root, env=FAST_PRESENCE)
        assert listed.code == 0, listed.err
        header, row = listed.out.splitlines()
        assert row.split()[header.split().index("QUEUES")] == "mail=3"
        assert listed.err == WARNING
        document = _workers(root)
        assert [w["queues"] for w in document["workers"]] == [{"mail": 3}]
        assert document["unserved_queues"] == ["default"]
    finally:
        stop_processes([worker])
    assert worker.returncode == 0, output()
    assert (
        f"with queues mail=3 (declared), leaving default ({reason}) to other workers; "
        "tenant databases on SQLite" in output()
    )


def test_a_second_worker_for_the_queue_left_out_ends_the_warning(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    mail = _start(root, ["--queues", "mail"], {})
    default = _start(root, ["--queues", "default"], {}, log="default.log")
    try:
        _wait_for(lambda: len(_workers(root)["workers"]) == 2, (root / "worker.log").read_text)
        listed = run_ket("workers", "list", cwd=root, env=FAST_PRESENCE)
        assert (listed.code, listed.err) == (0, "")
        document = _workers(root)
        served = sorted(json.dumps(w["queues"]) for w in document["workers"])
        assert (served, document["unserved_queues"]) == (['{"default": 2}', '{"mail": 3}'], [])
    finally:
        stop_processes([mail, default])
    assert (mail.returncode, default.returncode) == (0, 0)


def test_a_burst_on_some_queues_drains_them_alone(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    _enqueue(root, [NewJob(name="app.ship"), NewJob(name="app.notify", queue="mail")])
    burst = run_ket("worker", "--burst", "--queues", "mail", cwd=root)
    assert burst.code == 0, burst.err
    assert _states(root) == {("app.ship", "available"): 1, ("app.notify", "completed"): 1}
    assert "burst over: 1 job run in 1 tenant (1 completed)" in burst.err


def test_workers_list_without_a_workspace_lists_and_warns_of_nothing(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    (root / "pyproject.toml").write_text("[project]\nname = 'elsewhere'\n")
    listed = run_ket("workers", "list", "--format", "json", cwd=root)
    assert listed.code == 0, listed.err
    assert json.loads(listed.out)["unserved_queues"] is None


REFUSED = [
    (
        ["--queues", "mail,reports"],
        {},
        "--queues 'mail,reports': queue 'reports' is not declared (declared: default, mail)",
    ),
    (
        [],
        {"KET_WORKER_QUEUES": "mails"},
        "KET_WORKER_QUEUES 'mails': queue 'mails' is not declared (declared: default, mail)",
    ),
    (["--queues", ""], {}, "--queues '' names no queue; expected QUEUE,... such as mail"),
    (
        ["--queues", "mail", "--concurrency", "default=4"],
        {},
        "--concurrency 'default=4' sets queue 'default', which --queues 'mail' leaves out; add "
        "the queue there or drop the setting",
    ),
    (
        ["--concurrency", "default=0,mail=0"],
        {},
        "this worker would serve no queue: --concurrency 'default=0', --concurrency 'mail=0' "
        "leave out every declared queue; let it serve one at least",
    ),
    (
        ["--concurrency", "mail=-1"],
        {},
        "--concurrency 'mail=-1': N must be a whole number from 1 to 1000, or 0 for a queue "
        "this host does not serve; got '-1'",
    ),
]


@pytest.mark.parametrize(("flags", "extra", "message"), REFUSED)
def test_a_bad_selection_exits_2_with_one_line_naming_it(
    project: Project, flags: list[str], extra: dict[str, str], message: str
) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("worker", *flags, cwd=root, env=extra)
    assert (result.code, result.err) == (2, f"ket: error: {message}\n")


def test_dev_refuses_a_bad_selection_before_it_migrates_anything(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    result = run_ket("dev", "--queues", "reports", cwd=root)
    assert (result.code, result.err) == (
        2,
        "ket: error: --queues 'reports': queue 'reports' is not declared "
        "(declared: default, mail)\n",
    )
    assert not (root / ".ket" / "default.db").exists()
