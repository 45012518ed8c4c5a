"""Real `ket worker` processes on a real PostgreSQL: many replicas over one backlog, a worker
killed mid-job, and schedules fired once per tick across replicas."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.store import NewJob
from ket.store.sql import SqlStore

from ..databases import drop_database
from ..processes import stop_processes

APP = """
import asyncio, os, time, uuid
from pathlib import Path
from ket import define_deployment, define_job, define_module

RUNS = Path(os.environ["KET_TEST_RUNS"])

async def work(ctx, input):
    # one file per execution: the test counts how often each job really ran; `ms` of work
    (RUNS / f"{{ctx.job.id}}.{{ctx.job.attempt}}.{{uuid.uuid4().hex}}").touch()
    if input.ms:
        await asyncio.sleep(input.ms / 1000)

def hang_first(ctx, input):
    (RUNS / f"{{ctx.job.id}}.{{ctx.job.attempt}}.{{uuid.uuid4().hex}}").touch()
    if ctx.job.attempt == 1:
        time.sleep(120)   # killed here

async def tick(ctx, input):
    (RUNS / f"tick.{{int(ctx.schedule.tick.timestamp())}}.{{uuid.uuid4().hex}}").touch()

app = define_module(name="app", jobs={{
    "work": define_job(idempotent=True, input={{"n": "int", "ms": "int?"}}, handler=work),
    "hang_first": define_job(idempotent=True, handler=hang_first),
    "tick": define_job(idempotent=True, schedule={{"every": "10s"}}, handler=tick),
}})
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 8}}, "poll_min_ms": 20, "poll_max_ms": 200,
    "lease_ms": {lease_ms}, "schedule_sweep_ms": 200, "shutdown_grace_ms": 2000,
}})
"""


class Fleet:
    """A project folder, a fresh PostgreSQL database, and the worker processes started on it."""

    def __init__(self, root: Path, database_url: str) -> None:
        self.root = root
        self.url = database_url
        self.runs = root / "runs"
        self.runs.mkdir()
        self.processes: list[subprocess.Popen[str]] = []

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url,
            KET_TEST_RUNS=str(self.runs),
            KET_REGISTRY_URL=f"sqlite:///{self.root / 'registry.db'}",
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

    def start(self, log_level: str = "WARNING") -> subprocess.Popen[str]:
        log = self.root / f"worker-{len(self.processes)}.log"
        with log.open("w") as output:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", log_level],
                cwd=self.root,
                env=self.environment(),
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.processes.append(process)
        return process

    def enqueue(self, jobs: list[NewJob]) -> list[int]:
        async def insert() -> list[int]:
            store = await SqlStore.open(self.url)
            try:
                return [i.id for i in await store.job_insert(jobs)]
            finally:
                await store.close()

        return asyncio.run(insert())

    def query(self, statement: str) -> list[tuple[object, ...]]:
        with psycopg.connect(self.url) as connection:
            return connection.execute(statement).fetchall()

    def log_of(self, number: int) -> str:
        return (self.root / f"worker-{number}.log").read_text(errors="replace")

    def runs_of(self, prefix: str = "") -> list[str]:
        return sorted(p.name for p in self.runs.iterdir() if p.name.startswith(prefix))

    def report(self) -> str:
        """What a failed wait needs: jobs by name and state, each worker's state and log."""
        states = self.query(
            "SELECT name, state, count(*) FROM ket_jobs GROUP BY name, state ORDER BY name, state"
        )
        lines = [f"jobs by name and state: {states}"]
        for number, process in enumerate(self.processes):
            log = (self.root / f"worker-{number}.log").read_text(errors="replace")
            lines.append(f"worker {number} (pid {process.pid}, exit {process.poll()}):")
            lines.append(log[-3_000:] or "(no output)")
        return "\n".join(lines)

    def stop_all(self) -> None:
        stop_processes(self.processes)


@pytest.fixture
def fleet_factory(tmp_path: Path, postgres_url: str) -> Iterator[Callable[[int], Fleet]]:
    created: list[tuple[Fleet, str]] = []

    def make(lease_ms: int = 30_000, app: str = APP) -> Fleet:
        name = f"ket_it_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        root = tmp_path / name
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(app.format(lease_ms=lease_ms)))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
        url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
        fleet = Fleet(root, url)
        migrated = fleet.ket("migrate")
        assert migrated.returncode == 0, migrated.stderr
        created.append((fleet, name))
        return fleet

    yield make
    for fleet, name in created:
        fleet.stop_all()
        drop_database(postgres_url, name)


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_workers_run_each_of_a_thousand_jobs_exactly_once(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory()
    for _ in range(3):
        fleet.start(log_level="INFO")
    # every replica serving before the backlog lands, so that each has its share to take
    _until(
        lambda: all("serving deployment" in fleet.log_of(n) for n in range(3)),
        60,
        "three serving workers",
    )
    # 20 ms each: the backlog outlasts one replica's head start, so every replica gets a share
    jobs = [NewJob(name="app.work", payload={"n": n, "ms": 20}) for n in range(1_000)]
    ids = fleet.enqueue(jobs)
    try:
        _until(
            lambda: (
                fleet.query(
                    "SELECT count(*) FROM ket_jobs WHERE state = 'completed' AND name = 'app.work'"
                )[0][0]
                == 1_000
            ),
            120,
            "1,000 completed jobs",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    fleet.stop_all()
    assert [p.returncode for p in fleet.processes] == [0, 0, 0]
    # the schedule's ticks run beside the backlog when a 10 s boundary falls in the run
    runs = [name for name in fleet.runs_of() if not name.startswith("tick.")]
    assert len(runs) == 1_000
    assert sorted(int(name.split(".")[0]) for name in runs) == sorted(ids)
    workers = fleet.query("SELECT count(DISTINCT worker_id) FROM ket_jobs WHERE name = 'app.work'")
    assert workers == [(3,)]  # every replica took part
    assert fleet.query("SELECT max(attempt) FROM ket_jobs") == [(1,)]


def test_a_killed_worker_s_job_runs_again_once_after_its_lease(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory(lease_ms=1_500)
    [job_id] = fleet.enqueue([NewJob(name="app.hang_first")])
    doomed = fleet.start()
    _until(lambda: len(fleet.runs_of(f"{job_id}.1.")) == 1, 30, "the first attempt to start")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    fleet.start()
    _until(
        lambda: fleet.query(f"SELECT state FROM ket_jobs WHERE id = {job_id}") == [("completed",)],
        60,
        "the job to be rescued and completed",
    )
    assert len(fleet.runs_of(f"{job_id}.")) == 2
    assert fleet.query(f"SELECT attempt FROM ket_jobs WHERE id = {job_id}") == [(2,)]
    [(error,)] = fleet.query(f"SELECT error FROM ket_job_errors WHERE job_id = {job_id}")
    assert str(error).startswith("lease expired: worker ")


def test_three_replicas_fire_each_schedule_tick_once_and_all_honour_a_pause(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory()
    for _ in range(3):
        fleet.start()
    _until(lambda: len(fleet.runs_of("tick.")) >= 1, 40, "a schedule tick")
    paused = fleet.ket("schedules", "pause", "app.tick")
    assert (paused.returncode, paused.stdout) == (0, "schedule app.tick paused\n"), paused.stderr
    fired = len(fleet.query("SELECT id FROM ket_schedule_fires"))
    boundary = (int(time.time()) // 10 + 1) * 10  # the next tick, passed while paused
    time.sleep(max(0.0, boundary - time.time()) + 1.0)  # and a few sweeps of every replica
    assert len(fleet.query("SELECT id FROM ket_schedule_fires")) == fired  # no replica fired
    resumed = fleet.ket("schedules", "resume", "app.tick")
    assert resumed.returncode == 0, resumed.stderr
    _until(lambda: len(fleet.runs_of("tick.")) >= 2, 20, "the tick after the resume")
    time.sleep(0.5)  # let a duplicate, if any, show up
    fleet.stop_all()
    ticks = [name.split(".")[1] for name in fleet.runs_of("tick.")]
    assert len(ticks) == len(set(ticks)), f"a tick ran twice: {ticks}"
    assert all(int(t) % 10 == 0 for t in ticks)  # aligned to the epoch
    fires = fleet.query("SELECT tick, fired_at FROM ket_schedule_fires ORDER BY tick")
    assert len(fires) == len(ticks)
    last_tick, last_fired = fires[-1]
    assert isinstance(last_tick, datetime) and isinstance(last_fired, datetime)
    assert last_tick.timestamp() >= boundary  # the tick that came due while paused
    assert last_fired.timestamp() > boundary + 1.0  # fired once resumed, not on time


def test_three_workers_draining_a_queue_all_stop_claiming_within_a_second_of_its_pause(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory()
    for _ in range(3):
        fleet.start(log_level="INFO")
    _until(
        lambda: all("serving deployment" in fleet.log_of(n) for n in range(3)),
        60,
        "three serving workers",
    )
    # 100 ms each at 8 slots a worker: a backlog that lasts well past the pause
    ids = fleet.enqueue(
        [NewJob(name="app.work", payload={"n": n, "ms": 100}) for n in range(2_000)]
    )
    claimed = "SELECT count(DISTINCT worker_id) FROM ket_jobs WHERE attempted_at IS NOT NULL"
    try:
        _until(lambda: fleet.query(claimed) == [(3,)], 30, "every worker claiming")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    paused = fleet.ket("queues", "pause", "default")
    assert paused.returncode == 0, paused.stderr
    time.sleep(2.0)  # the attempts running at the pause end (100 ms each); no new one starts
    # when each worker last claimed, against when the pause committed (the database's clock)
    [(paused_at,)] = fleet.query("SELECT paused_at FROM ket_queue_pauses WHERE queue = 'default'")
    last = fleet.query(
        "SELECT worker_id, max(attempted_at) FROM ket_jobs WHERE worker_id IS NOT NULL "
        "GROUP BY worker_id ORDER BY 1"
    )
    assert isinstance(paused_at, datetime)
    late: dict[str, float] = {}
    for worker, at in last:
        assert isinstance(at, datetime)
        if at > paused_at:
            late[str(worker)] = (at - paused_at).total_seconds()
    assert all(seconds < 1.0 for seconds in late.values()), late
    print(f"the last claims after the pause committed, by worker (s): {late}")
    # the backlog's jobs only: the schedule's ticks (every 10 s, into this queue) go on arriving
    backlog = "SELECT state, count(*) FROM ket_jobs WHERE name = 'app.work' GROUP BY state"
    waiting = {str(state): int(str(count)) for state, count in fleet.query(backlog)}
    assert waiting.get("executing", 0) == 0, waiting  # a pause lets running jobs end
    left = waiting.get("available", 0)
    assert left > 500, waiting  # the backlog waits
    time.sleep(1.0)
    available = "SELECT count(*) FROM ket_jobs WHERE state = 'available' AND name = 'app.work'"
    assert fleet.query(available) == [(left,)]

    resumed = fleet.ket("queues", "resume", "default")
    assert resumed.returncode == 0, resumed.stderr
    done = "SELECT count(*) FROM ket_jobs WHERE state = 'completed' AND name = 'app.work'"
    try:
        _until(lambda: fleet.query(done) == [(2_000,)], 120, "the backlog after the resume")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    fleet.stop_all()
    assert [p.returncode for p in fleet.processes] == [0, 0, 0]
    runs = [name for name in fleet.runs_of() if not name.startswith("tick.")]
    assert sorted(int(name.split(".")[0]) for name in runs) == sorted(ids)  # each once
    assert fleet.query("SELECT max(attempt) FROM ket_jobs WHERE name = 'app.work'") == [(1,)]
    for number in range(3):
        assert " ERROR " not in fleet.log_of(number), fleet.log_of(number)[-3_000:]


def test_a_worker_vacuums_the_jobs_table_while_it_drains_a_backlog(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory()
    # 3 ms each, 8 at a time: the drain lasts seconds however fast the machine, so the
    # vacuumer's checks (once a second, after each 1,000 claims) see the dead rows' counters
    fleet.enqueue([NewJob(name="app.work", payload={"n": n, "ms": 3}) for n in range(10_000)])
    fleet.start()
    try:
        _until(
            lambda: (
                fleet.query(
                    "SELECT count(*) FROM ket_jobs WHERE state = 'completed' AND name = 'app.work'"
                )[0][0]
                == 10_000
            ),
            120,
            "10,000 completed jobs",
        )
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    fleet.stop_all()
    # the worker owns the table (it ran `ket migrate` as the same role), so it vacuums it as the
    # dead row versions pile up; this server's autovacuum, if it runs at all, is counted apart.
    # (The counters it reads lag up to a second behind: a backlog that drains in a few seconds
    # leaves it several looks at them.)
    [(vacuums,)] = fleet.query(
        "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'ket_jobs'"
    )
    assert isinstance(vacuums, int) and vacuums >= 1
    assert fleet.query("SELECT max(attempt) FROM ket_jobs") == [(1,)]
