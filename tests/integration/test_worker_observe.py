"""What an operator watching a real `ket worker` process sees, on SQLite and on PostgreSQL: the
counters scraped from `/metrics` after a drain equal the job table, the gauges show a backlog and
its drain, poll failures are counted; `--log-format json` gives one JSON object a line with the
events' fields; aiosqlite's debug lines stay out of `--log-level DEBUG` unless asked for."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ket.store import NewJob

APP = """
import asyncio, os
from pathlib import Path
from ket import Discard, define_deployment, define_job, define_module
from ket.runtime.events import hooks

GATE = Path(os.environ["KET_TEST_GATE"])

async def ok(ctx, input):
    ctx.log.info("did it", order="o-1")

async def flaky(ctx, input):
    if ctx.job.attempt == 1:
        raise RuntimeError("first attempt fails")

async def doomed(ctx, input):
    raise Discard("not wanted")

async def hopeless(ctx, input):
    raise RuntimeError("always fails")

async def hold(ctx, input):
    while not GATE.exists():
        await asyncio.sleep(0.02)

def soon(attempt):
    return 0.05

def broken_hook(event):
    if event.kind == "discarded" and os.environ.get("KET_TEST_BROKEN_HOOK") == "1":
        1 / 0

hooks.subscribe(broken_hook)

app = define_module(name="app", jobs={
    "ok": define_job(idempotent=True, handler=ok),
    "flaky": define_job(idempotent=True, backoff=soon, handler=flaky),
    "doomed": define_job(idempotent=True, queue="mail", handler=doomed),
    "hopeless": define_job(
        idempotent=True, queue="mail", max_attempts=2, backoff=soon, handler=hopeless
    ),
    "hold": define_job(idempotent=True, queue="slow", handler=hold),
})
main = define_deployment(name="main", modules=[app], worker={
    "queues": {"default": 4, "mail": 2, "slow": 1}, "poll_min_ms": 20, "poll_max_ms": 200,
})
"""
QUEUES = ("default", "mail", "slow")
STATES = ("available", "scheduled", "executing", "retryable", "completed", "discarded", "cancelled")
TERMINAL = ("completed", "discarded", "cancelled")
DECLARED = {"app.ok", "app.flaky", "app.doomed", "app.hopeless", "app.hold"}

Labels = tuple[tuple[str, str], ...]
Samples = dict[str, dict[Labels, float]]


class Worker:
    """A project folder on one tenant database, and the `ket worker` process started in it."""

    def __init__(self, root: Path, database_url: str) -> None:
        self.root = root
        self.url = database_url
        self.gate = root / "gate"
        self.log = root / "worker.log"
        self.process: subprocess.Popen[str] | None = None
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(APP))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')

    def start(self, *args: str, **environ: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url,
            KET_REGISTRY_URL=f"sqlite:///{self.root / 'registry.db'}",
            KET_TEST_GATE=str(self.gate),
            KET_METRICS_REFRESH_S="0.2",
            **environ,
        )
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", *args],
                cwd=self.root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=output,
                text=True,
            )

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def metrics_url(self) -> str:
        marker = "serving metrics at "
        until(lambda: marker in self.output(), 30, "the metrics URL in the log", self)
        line = next(line for line in self.output().splitlines() if marker in line)
        return line.split(marker, 1)[1].split()[0].rstrip('"')

    def scrape(self) -> Samples:
        with urllib.request.urlopen(self.metrics_url(), timeout=10) as response:
            body = response.read().decode()
        found: Samples = defaultdict(dict)
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                found[sample.name][tuple(sorted(sample.labels.items()))] = sample.value
        return found

    def enqueue(self, jobs: list[NewJob]) -> None:
        import asyncio

        from ket.store.sql import SqlStore

        async def insert() -> None:
            store = await SqlStore.open(self.url)
            try:
                await store.job_insert(jobs)
            finally:
                await store.close()

        asyncio.run(insert())

    def table(self) -> list[tuple[str, str, str, int, int]]:
        """(queue, name, state, rows, attempts) of the jobs table."""
        statement = (
            "SELECT queue, name, state, count(*), sum(attempt) FROM ket_jobs "
            "GROUP BY queue, name, state"
        )
        if self.url.startswith("sqlite:///"):
            with sqlite3.connect(self.url.removeprefix("sqlite:///")) as connection:
                return [tuple(row) for row in connection.execute(statement)]
        with psycopg.connect(self.url) as connection:
            return [tuple(row) for row in connection.execute(statement)]


def counted(series: dict[Labels, float]) -> dict[Labels, float]:
    """The series that counted something (every declared job's start at zero)."""
    return {labels: value for labels, value in series.items() if value}


def until(condition: Callable[[], bool], timeout: float, what: str, worker: Worker) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; worker log:\n{worker.output()[-3000:]}")


@pytest.fixture
def worker(tenant_database: str, tmp_path: Path) -> Iterator[Worker]:
    made = Worker(tmp_path / "project", tenant_database)
    yield made
    if made.process is not None and made.process.poll() is None:
        made.stop()


@pytest.fixture
def sqlite_worker(tmp_path: Path) -> Iterator[Worker]:
    made = Worker(tmp_path / "project", f"sqlite:///{tmp_path / 'tenant.db'}")
    yield made
    if made.process is not None and made.process.poll() is None:
        made.stop()


def migrate(worker: Worker) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    env.update(KET_DATABASE_URL=worker.url, KET_REGISTRY_URL=f"sqlite:///{worker.root}/registry.db")
    done = subprocess.run(
        [sys.executable, "-m", "ket.cli.main", "migrate"],
        cwd=worker.root,
        env={**env, "KET_TEST_GATE": str(worker.gate)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def drained(worker: Worker) -> bool:
    return all(state in TERMINAL for _, _, state, _, _ in worker.table())


def label(name: str) -> str:
    return name if name in DECLARED else "other"


def test_counters_scraped_after_a_drain_equal_the_job_table(worker: Worker) -> None:
    worker.enqueue(
        [NewJob(name="app.ok") for _ in range(30)]
        + [NewJob(name="app.flaky") for _ in range(10)]
        + [NewJob(name="app.doomed", queue="mail") for _ in range(5)]
        + [NewJob(name="app.hopeless", queue="mail", max_attempts=2) for _ in range(4)]
        + [NewJob(name="app.retired") for _ in range(3)]  # a job this deployment dropped
    )
    worker.start("--metrics-port", "0")
    until(lambda: drained(worker), 60, "the jobs to finish", worker)
    table = worker.table()
    attempts: dict[Labels, float] = defaultdict(float)
    started: dict[Labels, float] = defaultdict(float)
    for queue, name, state, rows, tried in table:
        job = (("job", label(name)), ("queue", queue))
        attempts[(*job, ("outcome", state))] += rows
        if tried > rows:  # each attempt before the last one failed
            attempts[(*job, ("outcome", "failed"))] += tried - rows
        if name in DECLARED:  # an undeclared job is discarded without starting
            started[job] += tried
    expected = {tuple(sorted(labels)): value for labels, value in attempts.items()}
    ran: dict[Labels, float] = defaultdict(float)
    for labels, value in attempts.items():
        ran[tuple(sorted(labels[:2]))] += value
    # outcomes are counted once recorded, a moment after the table shows them
    until(
        lambda: counted(worker.scrape()["ket_job_attempts_total"]) == expected,
        10,
        f"the counters to reach {expected}",
        worker,
    )
    scraped = worker.scrape()
    assert counted(scraped["ket_job_attempts_total"]) == expected
    assert sum(expected.values()) == 30 + 10 * 2 + 5 + 4 * 2 + 3
    assert counted(scraped["ket_job_duration_seconds_count"]) == dict(ran)
    assert counted(scraped["ket_job_wait_seconds_count"]) == {
        tuple(sorted(labels)): value for labels, value in started.items()
    }
    # the gauges, read from the table by the job stats service, say the same
    counts = {(("queue", queue), ("state", state)): 0.0 for queue in QUEUES for state in STATES}
    for queue, _, state, rows, _ in table:
        counts[(("queue", queue), ("state", state))] += rows
    until(lambda: worker.scrape()["ket_jobs"] == counts, 10, f"ket_jobs to reach {counts}", worker)
    idle = {(("queue", queue),): 0.0 for queue in QUEUES}
    assert worker.scrape()["ket_jobs_oldest_available_age_seconds"] == idle
    assert worker.stop() == 0


def test_gauges_show_a_backlog_and_then_its_drain(worker: Worker) -> None:
    worker.start("--metrics-port", "0")
    worker.metrics_url()
    worker.enqueue([NewJob(name="app.hold", queue="slow") for _ in range(5)])  # one at a time

    def backlog() -> bool:
        found = worker.scrape()
        return (
            found["ket_jobs"].get((("queue", "slow"), ("state", "available"))) == 4
            and found["ket_jobs"].get((("queue", "slow"), ("state", "executing"))) == 1
            and found["ket_jobs_oldest_available_age_seconds"][(("queue", "slow"),)] >= 1.0
            and found["ket_jobs_oldest_lease_age_seconds"][(("queue", "slow"),)] >= 1.0
            and found["ket_jobs_oldest_available_age_seconds"][(("queue", "mail"),)] == 0.0
        )

    until(backlog, 30, "the gauges to show 4 waiting and 1 running for a second", worker)
    worker.gate.touch()

    def drained_gauges() -> bool:
        found = worker.scrape()
        return (
            found["ket_jobs"].get((("queue", "slow"), ("state", "completed"))) == 5
            and found["ket_jobs"].get((("queue", "slow"), ("state", "available"))) == 0
            and found["ket_jobs_oldest_available_age_seconds"][(("queue", "slow"),)] == 0.0
            and found["ket_jobs_oldest_lease_age_seconds"][(("queue", "slow"),)] == 0.0
        )

    until(drained_gauges, 30, "the gauges to show the backlog done", worker)
    assert worker.stop() == 0


def test_failed_polls_of_a_database_without_tables_are_counted(sqlite_worker: Worker) -> None:
    sqlite_worker.start("--metrics-port", "0")  # no `ket migrate`: every claim fails
    until(
        lambda: all(
            sqlite_worker.scrape()["ket_poll_failures_total"].get((("queue", queue),), 0) >= 2
            for queue in QUEUES
        ),
        30,
        "poll failures on every queue",
        sqlite_worker,
    )
    assert sqlite_worker.stop() == 0


def test_json_logs_are_one_object_a_line_with_the_events_fields(sqlite_worker: Worker) -> None:
    migrate(sqlite_worker)
    sqlite_worker.enqueue(
        [NewJob(name="app.ok"), NewJob(name="app.flaky"), NewJob(name="app.doomed", queue="mail")]
    )
    sqlite_worker.start("--log-format", "json", "--log-level", "DEBUG", KET_TEST_BROKEN_HOOK="1")
    until(lambda: drained(sqlite_worker), 30, "the jobs to finish", sqlite_worker)
    until(lambda: "ZeroDivisionError" in sqlite_worker.output(), 10, "the hook", sqlite_worker)
    assert sqlite_worker.stop() == 0
    lines = sqlite_worker.output().splitlines()
    entries = [json.loads(line) for line in lines]  # every line, or this raises
    assert all({"time", "level", "logger", "message"} <= set(entry) for entry in entries)
    events = {(e.get("kind"), e.get("name")): e for e in entries if e["logger"] == "ket.jobs"}
    completed = events[("completed", "app.ok")]
    assert completed["level"] == "DEBUG"
    assert {"tenant", "job_id", "queue", "attempt", "duration_ms"} <= set(completed)
    assert (completed["queue"], completed["attempt"]) == ("default", 1)
    assert events[("started", "app.ok")]["waited_ms"] >= 0
    failed = events[("failed", "app.flaky")]
    assert (failed["level"], failed["error"]) == ("INFO", "RuntimeError: first attempt fails")
    assert events[("discarded", "app.doomed")]["error"] == "not wanted"
    handler_line = next(e for e in entries if e["logger"] == "ket.handler")
    assert (handler_line["message"], handler_line["order"]) == ("did it order=o-1", "o-1")
    [hook] = [e for e in entries if e["message"] == "a lifecycle hook failed on discarded"]
    assert "ZeroDivisionError: division by zero" in hook["traceback"]
    assert hook["traceback"].startswith("Traceback (most recent call last):")
    # --log-level DEBUG is ket's: the libraries' debug lines stay out without the opt-in
    assert [
        e for e in entries if e["logger"].startswith(("aiosqlite", "asyncio", "sqlalchemy"))
    ] == []


def test_third_party_debug_lines_appear_only_when_opted_in(sqlite_worker: Worker) -> None:
    migrate(sqlite_worker)
    sqlite_worker.enqueue([NewJob(name="app.ok")])
    sqlite_worker.start("--log-format", "json", "--log-level", "DEBUG", KET_LOG_THIRD_PARTY="1")
    until(lambda: drained(sqlite_worker), 30, "the job to finish", sqlite_worker)
    assert sqlite_worker.stop() == 0
    loggers = {json.loads(line)["logger"] for line in sqlite_worker.output().splitlines()}
    assert "aiosqlite" in loggers


def test_metrics_without_prometheus_client_say_what_to_install(sqlite_worker: Worker) -> None:
    shadow = sqlite_worker.root / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not installed here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    path = [str(shadow.parent), os.environ.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    done = subprocess.run(
        [sys.executable, "-m", "ket.cli.main", "worker", "--metrics-port", "0"],
        cwd=sqlite_worker.root,
        env={**env, "KET_TEST_GATE": str(sqlite_worker.gate)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "ket: error: metrics need the prometheus_client package: "
        "pip install 'ket-jobs[metrics]' (or pip install prometheus_client)\n"
    )
