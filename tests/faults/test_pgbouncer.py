"""`ket worker` and `open_client` through Debian's PgBouncer (tests/faults/pgbouncer.py), in
front of the tenant database.

In transaction mode a worker runs what a client enqueues through the pooler, its handlers'
`ctx.db` and `ctx.tx` included, and ticks its schedules, with no prepared statement failing
(PgBouncer 1.18 passes them through to whichever server connection comes next); NOTIFY never
reaches a LISTEN through the pooler, so the worker polls and says so, unless KET_LISTEN_URL
takes its LISTEN to the server directly, when a job enqueued wakes it at once. In statement mode
the worker refuses to start, naming the setting.

The worker polls once an hour: a job that runs sooner was woken (or found by the poll-only mode
the listener falls back to, which the log names).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import LiteralString

import psycopg
import pytest
from psycopg import sql

from tests.databases import drop_database
from tests.faults.fleet import until
from tests.faults.pgbouncer import PgBouncer

HOUR_MS = 3_600_000

WORKSPACE = f"""
from ket import define_deployment, define_job, define_model, define_module

async def work(ctx, input):
    # through the engine (SQLAlchemy): psycopg prepares a statement from its 5th run
    await ctx.db.insert("app.Mark", {{"kind": "work", "n": input.n}})
    await ctx.db.select("app.Mark", where={{"n": input.n}})

    async def inside(tx):
        await tx.db.insert("app.Mark", {{"kind": "tx", "n": input.n}})

    await ctx.tx(inside)

async def tick(ctx, input):
    await ctx.db.insert("app.Mark", {{"kind": "tick", "n": 0}})

app = define_module(
    name="app",
    models={{"Mark": define_model({{"kind": "string", "n": "int"}})}},
    jobs={{
        "work": define_job(idempotent=True, input={{"n": "int"}},
                           effects=["write:app.Mark", "read:app.Mark"], handler=work),
        "tick": define_job(idempotent=True, schedule={{"every": "10s"}},
                           effects=["write:app.Mark"], handler=tick),
    }},
)
# polls once an hour: a job that runs sooner was woken
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 4}}, "poll_min_ms": {HOUR_MS}, "poll_max_ms": {HOUR_MS},
    "schedule_sweep_ms": 1000, "shutdown_grace_ms": 1000,
}})
"""

CLIENT = """
import sys
from app.workspace import main
from ket import open_client
with open_client(main) as client:
    for n in range(int(sys.argv[1]), int(sys.argv[2])):
        client.enqueue("app.work", {"n": n})
"""


class Project:
    """A project folder and its tenant database, reached through `bouncer` or directly."""

    def __init__(self, root: Path, direct: str, bouncer: PgBouncer, database: str) -> None:
        self.root = root
        self.direct = direct
        self.pooled = bouncer.url(database)
        self.bouncer = bouncer
        self.workers: list[tuple[subprocess.Popen[str], Path]] = []
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(WORKSPACE))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')

    def environment(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.pooled,
            KET_REGISTRY_URL=f"sqlite:///{self.root / 'registry.db'}",
            PYTHONPATH=os.pathsep.join([str(self.root), *filter(None, [env.get("PYTHONPATH")])]),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def run(self, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *argv],
            cwd=self.root,
            env=self.environment(**env),
            capture_output=True,
            text=True,
            timeout=120,
        )

    def start_worker(self, **env: str) -> subprocess.Popen[str]:
        log = self.root / f"worker-{len(self.workers)}.log"
        with log.open("w") as output:
            worker = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "INFO"],
                cwd=self.root,
                env=self.environment(**env),
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.workers.append((worker, log))
        return worker

    def log(self) -> str:
        return "\n".join(log.read_text(errors="replace") for _, log in self.workers)

    def enqueue(self, start: int, stop: int) -> None:
        """open_client through the pooler, in a process of its own, one enqueue per job."""
        done = self.run("-c", CLIENT, str(start), str(stop))
        assert done.returncode == 0, done.stderr

    def query(self, statement: LiteralString) -> list[tuple[object, ...]]:
        with psycopg.connect(self.direct, autocommit=True) as connection:
            return connection.execute(statement).fetchall()

    def completed(self) -> int:
        """How many `app.work` jobs completed (the ticks' are not counted)."""
        [(count,)] = self.query(
            "SELECT count(*) FROM ket_jobs WHERE state = 'completed' AND name = 'app.work'"
        )
        assert isinstance(count, int)
        return count

    def stop(self) -> None:
        for worker, _ in self.workers:
            if worker.poll() is None:
                worker.terminate()
        for worker, _ in self.workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)


def _project(tmp_path: Path, server: str, pool_mode: str) -> Iterator[Project]:
    name = f"ket_pgbouncer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    direct = f"{server.rsplit('/', 1)[0]}/{name}"
    try:
        with PgBouncer("127.0.0.1", 5432, pool_mode=pool_mode) as bouncer:
            made = Project(tmp_path / "shop", direct, bouncer, name)
            migrated = made.run("-m", "ket.cli.main", "migrate", KET_DATABASE_URL=direct)
            assert migrated.returncode == 0, migrated.stderr
            try:
                yield made
            finally:
                made.stop()
    finally:
        drop_database(server, name)


@pytest.fixture
def transaction_pool(tmp_path: Path, postgres_url: str) -> Iterator[Project]:
    yield from _project(tmp_path, postgres_url, "transaction")


@pytest.fixture
def statement_pool(tmp_path: Path, postgres_url: str) -> Iterator[Project]:
    yield from _project(tmp_path, postgres_url, "statement")


def _retried(project: Project) -> list[tuple[object, ...]]:
    """The jobs that took more than one attempt (none should)."""
    return project.query("SELECT id, attempt FROM ket_jobs WHERE attempt <> 1")


def test_a_worker_through_transaction_pooling_runs_client_jobs_and_ticks_polling_without_notify(
    transaction_pool: Project,
) -> None:
    project = transaction_pool
    project.start_worker()
    project.enqueue(0, 30)
    until(lambda: project.completed() >= 30, 60, "the 30 jobs enqueued through the pooler")
    # a tick after the first sweep (a schedule does not fire in the tick it was installed in)
    until(
        lambda: project.query("SELECT count(*) FROM m_app_mark WHERE kind = 'tick'")[0][0] != 0,
        40,
        "a schedule tick",
    )
    log = project.log()
    until(lambda: "NOTIFY does not arrive" in project.log(), 20, "the poll-only line")
    project.enqueue(30, 40)
    until(lambda: project.completed() >= 40, 30, "jobs enqueued while polling")
    project.stop()
    log = project.log()
    assert "goes through a connection pooler" in log and "KET_LISTEN_URL" in log, log
    assert "prepared statement" not in log, log
    assert " ERROR " not in log and "failed" not in log, log
    assert _retried(project) == []  # every job ran at its first attempt
    [(work, tx)] = project.query(
        "SELECT count(*) FILTER (WHERE kind = 'work'), count(*) FILTER (WHERE kind = 'tx') "
        "FROM m_app_mark"
    )
    assert (work, tx) == (40, 40)
    assert "prepared statement" not in project.bouncer.log


def test_a_worker_through_transaction_pooling_listens_directly_at_ket_listen_url(
    transaction_pool: Project,
) -> None:
    project = transaction_pool
    direct_server = project.direct.rsplit("/", 1)[0]  # no database: the control database's
    project.start_worker(KET_LISTEN_URL=direct_server)
    until(
        lambda: (
            project.query(
                "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ket_jobs' "
                "AND datname = current_database() AND application_name LIKE 'ket worker %'"
            )[0][0]
            == 1
        ),
        30,
        "the worker's LISTEN",
    )
    time.sleep(7)  # past the listener's check that its own NOTIFY arrives (5 s)
    for n in range(3):
        started = time.monotonic()
        project.enqueue(n, n + 1)
        done = n + 1
        until(lambda: project.completed() == done, 30, f"job {n}")  # noqa: B023
        # woken: the client's NOTIFY went through the pooler, the LISTEN bypasses it
        assert time.monotonic() - started < 10
    project.stop()
    log = project.log()
    assert "NOTIFY does not arrive" not in log, log
    assert "goes through a connection pooler" in log, log
    assert _retried(project) == []


def test_a_bad_ket_listen_url_stops_the_worker_at_start_naming_it(
    transaction_pool: Project,
) -> None:
    project = transaction_pool
    for value, said in [
        ("mysql://app:s3cret@db/erp", "KET_LISTEN_URL must be a postgresql:// URL"),
        (
            "postgresql://root:s3cret@127.0.0.1:5432/postgres",
            "KET_LISTEN_URL reaches database 'postgres'",
        ),
    ]:
        done = project.run("-m", "ket.cli.main", "worker", KET_LISTEN_URL=value)
        assert done.returncode != 0
        assert said in done.stderr, done.stderr
        assert "s3cret" not in done.stderr + done.stdout


def test_a_worker_refuses_to_start_behind_statement_pooling(statement_pool: Project) -> None:
    done = statement_pool.run("-m", "ket.cli.main", "worker")
    assert done.returncode != 0
    assert "pool_mode = statement" in done.stderr, done.stderr
    assert "pool_mode = transaction or session" in done.stderr
