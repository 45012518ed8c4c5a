"""A real `ket worker` on PostgreSQL imports SQLAlchemy only when its app needs it.

Every operation a worker runs goes through the store's lane (generated PostgreSQL text on plain
psycopg connections), and the SQLAlchemy engine is made on first use: so an app without models
whose handlers use neither `ctx.db` nor `ctx.tx` runs without SQLAlchemy (most of ket's start-up
time and memory), and one that uses them still works. Each worker runs with `-X importtime`,
whose log names every module the process imported, whenever it did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.databases import drop_databases

APP = """
from datetime import timedelta

from ket import define_deployment, define_job, define_module, define_model

async def first(ctx, input):
    # an insert, a unique-key insert that coalesces, and the sent ledger; the holder waits a
    # few seconds, so it is still active for the second enqueue however busy the machine is
    later = ctx.now() + timedelta(seconds=3)
    key = f"second:{{input.n}}"
    await ctx.jobs.enqueue("app.second", {{"n": input.n}}, unique_key=key, run_at=later)
    again = await ctx.jobs.enqueue("app.second", {{"n": input.n}}, unique_key=key, run_at=later)
    assert again.coalesced, again
    await ctx.transport.send({{
        "from": {{"address": "app@example.com"}}, "to": [{{"address": "a@example.com"}}],
        "subject": "hi", "text": "hello",
        "idempotency_key": f"first:{{input.n}}",
    }})

async def second(ctx, input):
    {second_body}

async def tick(ctx, input):
    pass

{models}
app = define_module(name="app", {module_models}jobs={{
    "first": define_job(
        idempotent=True, input={{"n": "int"}}, handler=first,
        effects=["enqueue:app.second", "transport:send"],
    ),
    "second": define_job(
        idempotent=True, input={{"n": "int"}}, handler=second, effects={second_effects},
    ),
    "tick": define_job(idempotent=True, schedule={{"every": "10s"}}, handler=tick),
}})
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 4}}, "poll_min_ms": 20, "poll_max_ms": 200, "schedule_sweep_ms": 200,
}})
"""
# the parts of APP's text that differ between the projects
WITHOUT_MODELS: dict[str, object] = {
    "second_body": "pass",
    "models": "",
    "module_models": "",
    "second_effects": [],
}
WITH_MODELS: dict[str, object] = {
    "second_body": 'await ctx.db.insert("app.Note", {"n": input.n})',
    "models": 'NOTE = define_model({"n": "int"})',
    "module_models": 'models={"Note": NOTE}, ',
    "second_effects": ["write:app.Note"],
}
WITH_TX: dict[str, object] = {
    "second_body": (
        "async def body(tx):\n        await tx.jobs.enqueue('app.tick')\n    await ctx.tx(body)"
    ),
    "models": "",
    "module_models": "",
    "second_effects": ["enqueue:app.tick"],
}


class Project:
    """A project folder on a fresh PostgreSQL database, and its worker's import log."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.log = root / "worker.log"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url,
            KET_REGISTRY_URL=f"sqlite:///{self.root / 'registry.db'}",
            KET_TRANSPORT_URL=f"dev:{self.root / 'outbox'}",
        )
        return env

    def ket(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ket.cli.main", *args],
            cwd=self.root,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def run_worker_until(self, done: Callable[[], bool]) -> str:
        """Run `ket worker` until `done()`, stop it, and return its log (imports included)."""
        with self.log.open("w") as output:
            process = subprocess.Popen(
                [sys.executable, "-X", "importtime", "-m", "ket.cli.main", "worker"],
                cwd=self.root,
                env=self.environment(),
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            deadline = time.monotonic() + 60
            while not done():
                assert process.poll() is None, self.log.read_text()
                assert time.monotonic() < deadline, self.log.read_text()
                time.sleep(0.1)
            time.sleep(0.5)  # the settlement, the sweep and the services go on a little
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        assert process.returncode == 0, self.log.read_text()
        return self.log.read_text()

    def count(self, where: str) -> int:
        with psycopg.connect(self.url) as connection:
            row = connection.execute(f"SELECT count(*) FROM ket_jobs WHERE {where}").fetchone()
        assert row is not None
        return int(row[0])

    def enqueue_first(self, n: int) -> None:
        with psycopg.connect(self.url) as connection:  # as any producer may: plain SQL
            connection.execute(
                "INSERT INTO ket_jobs (name, queue, state, priority, payload, payload_version, "
                "attempt, max_attempts, run_at, enqueued_at, fence, cancel_requested) VALUES "
                "('app.first', 'default', 'available', 0, %s, 1, 0, 5, now(), now(), 0, false)",
                (f'{{"n": {n}}}',),
            )


@pytest.fixture
def make_project(
    tmp_path: Path, postgres_url: str
) -> Iterator[Callable[[dict[str, object]], Project]]:
    names: list[str] = []

    def make(parts: dict[str, object]) -> Project:
        name = f"ket_lean_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        names.append(name)
        root = tmp_path / name
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(APP.format(**parts)))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
        project = Project(root, postgres_url.rsplit("/", 1)[0] + f"/{name}")
        migrated = project.ket("migrate")
        assert migrated.returncode == 0, migrated.stderr
        return project

    yield make
    drop_databases(postgres_url, names)


def _imported(log: str) -> set[str]:
    """The modules an `-X importtime` log names."""
    lines = [line for line in log.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip() for line in lines}


def _all_done(project: Project) -> Callable[[], bool]:
    return lambda: (
        project.count("name LIKE 'app.%' AND state <> 'completed'") == 0
        and (project.count("name = 'app.second' AND state = 'completed'") == 2)
    )


def test_a_worker_without_models_runs_its_jobs_and_never_imports_sqlalchemy(
    make_project: Callable[[dict[str, object]], Project],
) -> None:
    project = make_project(WITHOUT_MODELS)
    project.enqueue_first(1)
    project.enqueue_first(2)
    log = project.run_worker_until(_all_done(project))
    imported = _imported(log)
    assert "ket.store.sql.lane" in imported  # the log is complete
    assert {m for m in imported if m.split(".")[0] == "sqlalchemy"} == set()
    # the manifest room may load by now: the worker hashes its manifest for the control
    # database in a thread at its first report (ket.cli.presence), never before its first job
    assert {"ket.control.registry"} & imported == set()
    # the schedule was installed by the sweep, on the lane
    with psycopg.connect(project.url) as connection:
        assert connection.execute("SELECT count(*) FROM ket_schedules").fetchone() == (1,)
    sent = list((project.root / "outbox").rglob("*.eml"))
    assert len(sent) == 2  # two messages, two keys in the sent ledger


@pytest.mark.parametrize("parts", [WITH_MODELS, WITH_TX], ids=["ctx.db", "ctx.tx"])
def test_a_worker_whose_jobs_need_the_engine_makes_it_and_runs_them(
    make_project: Callable[[dict[str, object]], Project], parts: dict[str, object]
) -> None:
    project = make_project(parts)
    project.enqueue_first(1)
    project.enqueue_first(2)
    log = project.run_worker_until(_all_done(project))
    assert "sqlalchemy.ext.asyncio" in _imported(log)
    if parts is WITH_MODELS:
        with psycopg.connect(project.url) as connection:
            rows = connection.execute("SELECT n FROM m_app_note ORDER BY n").fetchall()
        assert rows == [(1,), (2,)]
