"""Real `ket worker` processes on a fresh PostgreSQL database, for fault tests.

Handlers record every attempt in a side-effect table (`fx`: job, attempt, worker pid, start and
end times, whether it saw its abort) over a connection of their own that bypasses the fault
proxy, so the tests can assert from the job table and that log what really happened: nothing
lost, no attempt overlapping another of the same job inside one process, an attempt of a
partitioned worker ending before its lease did.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from ket.store import NewJob
from ket.store.sql import SqlStore

from ..processes import stop_processes

APP = """
import asyncio, os, threading, time
from datetime import datetime, timezone
import psycopg
from ket import Retry, define_deployment, define_job, define_module, define_model

FX = os.environ["KET_TEST_FX_URL"]
# one connection per thread, kept: a new one per write blocked the event loop ~7 ms twice a job
# (a server process forked each time), which made a backlog of hundreds drain for seconds.
# A connection the server terminated (a fault test's doing) is replaced, and the write retried.
_fx = threading.local()

def fx_write(statement, params):
    for tries_left in (1, 0):
        connection = getattr(_fx, "connection", None)
        if connection is None or connection.closed:
            connection = _fx.connection = psycopg.connect(FX, autocommit=True)
        try:
            connection.execute(statement, params)
            return
        except psycopg.OperationalError:
            connection.close()
            if not tries_left:
                raise

def fx_start(ctx):
    fx_write("INSERT INTO fx (job, attempt, pid, started) "
             "VALUES (%s, %s, %s, clock_timestamp())",
             (ctx.job.id, ctx.job.attempt, os.getpid()))

def fx_end(ctx, note=""):
    fx_write("UPDATE fx SET ended = clock_timestamp(), note = %s "
             "WHERE job = %s AND attempt = %s AND pid = %s AND ended IS NULL",
             (note, ctx.job.id, ctx.job.attempt, os.getpid()))

async def work(ctx, input):
    # the first attempt takes input.ms (or until aborted); a retry is quick
    fx_start(ctx)
    seconds = input.ms / 1000 if ctx.job.attempt == 1 else 0.01
    try:
        await asyncio.wait_for(ctx.signal.wait(), seconds)
    except asyncio.TimeoutError:
        pass
    # the log and the outcome read the signal once: an abort that comes while the log is
    # written is one the handler did not see (it finished its work), as the log says
    reason = ctx.signal.reason
    fx_end(ctx, reason or "")
    if reason:
        ctx.signal.throw_if_aborted()

def plain_late_write(ctx, input):
    fx_start(ctx)
    time.sleep(input.ms / 1000)          # ignores its timeout
    note = "written"
    try:
        ctx.db.insert("app.Mark", {"job": str(ctx.job.id), "attempt": ctx.job.attempt})
    except Exception as error:
        note = type(error).__name__
    fx_end(ctx, note)

def stuck(ctx, input):
    fx_start(ctx)
    time.sleep(120)                      # ignores every signal

def hold_connections(ctx, input):
    # three nested transactions: three connections held per job, more than the pool has
    fx_start(ctx)
    def nest(depth):
        def inside(tx):
            tx.db.insert("app.Mark", {"job": str(ctx.job.id), "attempt": ctx.job.attempt})
            if depth > 1:
                ctx.tx(nest(depth - 1))
            else:
                time.sleep(input.ms / 1000)
        return inside
    try:
        ctx.tx(nest(3))
    finally:
        fx_end(ctx)

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")

async def poison(ctx, input):
    kind = input.kind
    if kind == "surrogate":
        raise ValueError(b"bad \\xff bytes".decode("utf-8", "surrogateescape"))
    if kind == "nul":
        raise ValueError("nul \\x00 in the middle")
    if kind == "huge":
        raise ValueError("x" * 2_000_000)
    if kind == "retry_inf":
        raise Retry(in_seconds=float("inf"))
    if kind == "retry_nan":
        raise Retry(in_seconds=float("nan"))
    if kind == "retry_1e30":
        raise Retry(in_seconds=1e30)
    if kind == "unprintable":
        raise Unprintable()
    if kind == "backoff":
        raise ValueError("fails into a broken backoff")

app = define_module(
    name="app",
    models={"Mark": define_model({"job": "string", "attempt": "int"})},
    jobs={
        "work": define_job(idempotent=True, input={"ms": "int"}, handler=work),
        # retried at once: the retry is due while the first attempt's thread still runs
        "late": define_job(idempotent=True, input={"ms": "int"}, timeout_ms=300,
                           backoff=lambda attempt: 0.1,
                           effects=["write:app.Mark"], handler=plain_late_write),
        "stuck": define_job(idempotent=True, handler=stuck),
        "hold": define_job(idempotent=True, input={"ms": "int"}, effects=["write:app.Mark"],
                           handler=hold_connections),
        "poison": define_job(idempotent=True, input={"kind": "string"}, max_attempts=3,
                             handler=poison),
        "poison_backoff": define_job(idempotent=True, input={"kind": "string"}, max_attempts=3,
                                     backoff=lambda attempt: 1e300, handler=poison),
    },
)
main = define_deployment(name="main", modules=[app], worker={
    "queues": {"default": QUEUE_SLOTS}, "poll_min_ms": 20, "poll_max_ms": 200,
    "lease_ms": LEASE_MS, "schedule_sweep_ms": 1000, "shutdown_grace_ms": 1000,
})
"""

FX_TABLE = """
CREATE TABLE fx (
    job bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    started timestamptz NOT NULL, ended timestamptz, note text
)
"""


class FaultFleet:
    """A project folder, a fresh database with ket's tables and `fx`, and worker processes."""

    def __init__(self, root: Path, url: str, *, lease_ms: int, slots: int) -> None:
        self.root = root
        self.url = url
        self.lease_ms = lease_ms
        self.processes: list[subprocess.Popen[str]] = []
        self.logs: list[Path] = []
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        app = APP.replace("LEASE_MS", str(lease_ms)).replace("QUEUE_SLOTS", str(slots))
        (root / "app" / "workspace.py").write_text(textwrap.dedent(app))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(FX_TABLE)
        migrated = self.ket("migrate")
        assert migrated.returncode == 0, migrated.stderr

    def environment(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url,
            KET_TEST_FX_URL=self.url,
            KET_REGISTRY_URL=f"sqlite:///{self.root / 'registry.db'}",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
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

    def start(self, **env: str) -> subprocess.Popen[str]:
        """Start `ket worker`; `env` overrides (e.g. KET_DATABASE_URL through a proxy)."""
        log = self.root / f"worker-{len(self.processes)}.log"
        with log.open("w") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "INFO"],
                cwd=self.root,
                env=self.environment(**env),
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.processes.append(process)
        self.logs.append(log)
        return process

    def log_of(self, process: subprocess.Popen[str]) -> str:
        return self.logs[self.processes.index(process)].read_text()

    def enqueue(self, jobs: list[NewJob]) -> list[int]:
        async def insert() -> list[int]:
            store = await SqlStore.open(self.url)
            try:
                return [i.id for i in await store.job_insert(jobs)]
            finally:
                await store.close()

        return asyncio.run(insert())

    def query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url, autocommit=True) as connection:
            return connection.execute(statement, params or None).fetchall()

    def state(self, job_id: int) -> str:
        [(state,)] = self.query("SELECT state FROM ket_jobs WHERE id = %s", job_id)
        return str(state)

    def attempts(self, job_id: int) -> list[tuple[int, int, datetime, datetime | None, str]]:
        """The side-effect log of a job: (attempt, pid, started, ended, note), in start order."""
        rows = self.query(
            "SELECT attempt, pid, started, ended, note FROM fx WHERE job = %s ORDER BY started",
            job_id,
        )
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def assert_no_overlap_within_a_process(self, job_id: int) -> None:
        by_pid: dict[int, list[tuple[datetime, datetime | None]]] = {}
        for _, pid, started, ended, _ in self.attempts(job_id):
            by_pid.setdefault(pid, []).append((started, ended))
        for pid, spans in by_pid.items():
            for (_, first_end), (second_start, _) in itertools.pairwise(spans):
                assert first_end is not None and first_end <= second_start, (
                    f"job {job_id}: two attempts overlapped in worker process {pid}: {spans}"
                )

    def stop_all(self) -> None:
        stop_processes(self.processes)


def until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for `condition` (polling every 0.1 s); AssertionError naming `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
