"""Every way of making a job runnable wakes an idle worker, with tenants registered on
PostgreSQL (the workers listen on the control database, not on the tenant databases).

The worker polls once an hour and visits each tenant once an hour (its process runs `ket
worker` with the safety visit's interval raised from 30 s: a wrapper, below), so a job that
starts within seconds was woken by a hint. Each test uses a tenant of its own: a function
called through `ket serve` or `ket call`, a retry from the dashboard (HTTP, with its CSRF
token), `ket jobs retry` by id and by filter, `ket jobs rerun`, and an enqueue on the
application's own psycopg connection followed by `client.wake()` / `await client.awake()`.
Before issue 26's item 4 the server and the commands opened the tenant's store without the
control channel: their jobs waited for the safety visit.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx
import psycopg
import pytest
from psycopg import sql

from ket.client import open_async_client, open_client
from ket.control.registry import TenantRegistry
from ket.declare.deployment import DeploymentDecl
from ket.store.sql import SqlStore
from tests.databases import drop_databases

HOUR_MS = 3_600_000
WOKEN_WITHIN = 10.0  # seconds; without a wake-up, the next poll or visit is an hour away
TENANTS = ("serve", "call", "dash", "retry", "bulk", "rerun", "conn")

APP = f"""
from ket import define_deployment, define_function, define_job, define_module
from ket.serve import AuthRequest, Principal

async def authenticate(request: AuthRequest):
    if request.bearer_token() == "t0ken":
        return Principal(subject="ops", permissions={{"call:*", "jobs:read", "jobs:write"}})
    return None

async def work(ctx, input):
    return None

async def flaky(ctx, input):
    if ctx.job.attempt == 1:  # discarded on its first attempt, completed on a retry
        raise RuntimeError("first attempt fails")

async def place(ctx, input):
    await ctx.jobs.enqueue("app.work", {{"n": input.n}})
    return "placed"

app = define_module(
    name="app",
    functions={{
        "place": define_function(input={{"n": "int"}}, effects=["enqueue:app.work"], handler=place),
    }},
    jobs={{
        "work": define_job(input={{"n": "int"}}, idempotent=True, handler=work),
        "flaky": define_job(idempotent=True, max_attempts=1, handler=flaky),
    }},
)
main = define_deployment(
    name="main",
    modules=[app],
    worker={{"queues": {{"default": 2}}, "poll_min_ms": {HOUR_MS}, "poll_max_ms": {HOUR_MS}}},
    serve={{"authenticate": authenticate}},
)
"""
# `ket worker`, its tenants' safety visits once an hour rather than every 30 s
WORKER = """
import sys
from ket.runtime import visit

visit.visit_every = lambda tenants, at_least=3600.0: max(at_least, tenants / 8)
from ket.cli.main import main

sys.exit(main(["worker", "--log-level", "INFO"]))
"""
PROJECT = "wake_paths_app"  # the project's module: a name no other test imports
TOKEN = {"Authorization": "Bearer t0ken"}
LISTENING = re.compile(r"on (http://127\.0\.0\.1:\d+)")


@dataclass
class Fleet:
    """This module's databases (a registry, a tenant database each), its project folder and
    its worker."""

    admin: str
    prefix: str
    root: Path
    worker: subprocess.Popen[str] | None = None
    names: list[str] = field(default_factory=list)

    def url(self, database: str) -> str:
        return f"{self.admin.rsplit('/', 1)[0]}/{self.prefix}{database}"

    @property
    def template(self) -> str:
        return self.url("{tenant}")

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(KET_DATABASE_URL=self.template, KET_REGISTRY_URL=self.url("registry"))
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.root), *filter(None, [os.environ.get("PYTHONPATH")])]
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

    def job(self, tenant: str, job_id: int) -> tuple[str, int]:
        """(state, attempt) of a job."""
        with psycopg.connect(self.url(tenant)) as connection:
            row = connection.execute(
                "SELECT state, attempt FROM ket_jobs WHERE id = %s", (job_id,)
            ).fetchone()
        assert row is not None, (tenant, job_id)
        return str(row[0]), int(row[1])

    def log(self) -> str:
        return (self.root / "worker.log").read_text(errors="replace")[-4_000:]

    def until(self, tenant: str, job_id: int, state: str, seconds: float) -> float:
        """Wait until the job is in `state`; how long that took (AssertionError after
        `seconds`, with the worker's log)."""
        began = time.monotonic()
        while self.job(tenant, job_id)[0] != state:
            if time.monotonic() - began > seconds:
                raise AssertionError(
                    f"job {job_id} of tenant {tenant} is {self.job(tenant, job_id)}, not "
                    f"{state}, after {seconds} s:\n{self.log()}"
                )
            time.sleep(0.05)
        return time.monotonic() - began


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("enqueue_paths")
    (root / f"{PROJECT}.py").write_text(textwrap.dedent(APP))
    (root / "pyproject.toml").write_text(f'[tool.ket]\nworkspace = "{PROJECT}.py"\n')
    made = Fleet(admin=postgres_url, prefix=f"ket_wake_{uuid.uuid4().hex[:8]}_", root=root)
    try:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            for name in ("registry", *TENANTS):
                database = made.prefix + name
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                made.names.append(database)
        asyncio.run(_migrate([made.url(tenant) for tenant in TENANTS]))
        registry = TenantRegistry(made.url("registry"))
        try:
            for tenant in TENANTS:
                registry.add(tenant)
        finally:
            registry.close()
        with (root / "worker.log").open("w") as sink:
            made.worker = subprocess.Popen(
                [sys.executable, "-c", WORKER],
                cwd=root,
                env=made.environment(),
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
            )
        deadline = time.monotonic() + 60
        # every tenant served, and its first visit (at once) over before any test enqueues
        while made.log().count("serving tenant") < len(TENANTS) or not _listening(made):
            assert time.monotonic() < deadline, f"the worker did not start:\n{made.log()}"
            time.sleep(0.1)
        time.sleep(1.0)
        yield made
    finally:
        if made.worker is not None:
            made.worker.terminate()
            made.worker.wait(timeout=60)
        drop_databases(postgres_url, made.names)


async def _migrate(urls: list[str]) -> None:
    for url in urls:
        store = await SqlStore.open(url, migrate=True)
        await store.close()


def _listening(fleet: Fleet) -> bool:
    """Whether the worker holds its LISTEN on the control database."""
    with psycopg.connect(fleet.admin, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN%%'",
            (fleet.prefix + "registry",),
        ).fetchone()
    return bool(row and row[0])


def _enqueue(fleet: Fleet, tenant: str, name: str, input: dict[str, int] | None = None) -> int:
    """A job enqueued by open_client (woken through the control channel, as before)."""
    with open_client(_deployment(), tenant=tenant, database_url=fleet.template) as client:
        return client.enqueue(name, input).id


@pytest.fixture(autouse=True)
def project_on_path(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's app importable here, and its registry found as the worker finds it."""
    monkeypatch.syspath_prepend(str(fleet.root))
    monkeypatch.setenv("KET_REGISTRY_URL", fleet.url("registry"))
    monkeypatch.delenv("KET_DATABASE_URL", raising=False)


def _deployment() -> DeploymentDecl:
    """The project's deployment, imported here as the worker imports it."""
    deployment: DeploymentDecl = importlib.import_module(PROJECT).main
    return deployment


def _discarded(fleet: Fleet, tenant: str) -> int:
    """A job of `tenant` that ran once and was discarded (app.flaky, woken by its enqueue)."""
    job_id = _enqueue(fleet, tenant, "app.flaky")
    fleet.until(tenant, job_id, "discarded", WOKEN_WITHIN)
    return job_id


class Server:
    """`ket serve` on a free port, for the module's tenants."""

    def __init__(self, fleet: Fleet) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "serve", "--port", "0"],
            cwd=fleet.root,
            env=fleet.environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self._address()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.put(line)

    def _address(self) -> str:
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            seen.append(line)
            found = LISTENING.search(line)
            if found and "serving the functions" in line:
                return found.group(1)
        self.process.kill()
        raise AssertionError("ket serve did not start:\n" + "".join(seen))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)  # it closes the pipe


@pytest.fixture
def server(fleet: Fleet) -> Iterator[Server]:
    started = Server(fleet)
    yield started
    started.stop()


def test_a_job_a_served_function_enqueues_wakes_the_worker(fleet: Fleet, server: Server) -> None:
    answer = httpx.post(
        f"{server.url}/functions/app.place",
        json={"n": 7},
        headers={**TOKEN, "X-Ket-Tenant": "serve"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    fleet.until("serve", 1, "completed", WOKEN_WITHIN)


def test_a_job_a_function_enqueues_under_ket_call_wakes_the_worker(fleet: Fleet) -> None:
    done = fleet.ket("call", "app.place", '{"n": 3}', "--tenant", "call")
    assert done.returncode == 0, done.stderr
    fleet.until("call", 1, "completed", WOKEN_WITHIN)


def test_a_retry_from_the_dashboard_wakes_the_worker(fleet: Fleet, server: Server) -> None:
    job_id = _discarded(fleet, "dash")
    page = f"{server.url}/dashboard/t/dash/jobs/{job_id}"
    with httpx.Client(headers=TOKEN, timeout=30) as browser:
        shown = browser.get(page)
        assert shown.status_code == 200, shown.text
        token = shown.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        done = browser.post(f"{page}/retry", data={"csrf": token}, follow_redirects=False)
    assert done.status_code == 303, done.text
    fleet.until("dash", job_id, "completed", WOKEN_WITHIN)
    assert fleet.job("dash", job_id) == ("completed", 2)


def test_ket_jobs_retry_wakes_the_worker(fleet: Fleet) -> None:
    job_id = _discarded(fleet, "retry")
    done = fleet.ket("jobs", "retry", str(job_id), "--tenant", "retry")
    assert done.returncode == 0, done.stderr
    fleet.until("retry", job_id, "completed", WOKEN_WITHIN)


def test_ket_jobs_retry_by_filter_wakes_the_worker_for_every_job(fleet: Fleet) -> None:
    jobs = [_discarded(fleet, "bulk") for _ in range(3)]
    done = fleet.ket("jobs", "retry", "--tenant", "bulk", "--state", "discarded", "--yes")
    assert done.returncode == 0, done.stderr
    for job_id in jobs:
        fleet.until("bulk", job_id, "completed", WOKEN_WITHIN)


def test_ket_jobs_rerun_wakes_the_worker(fleet: Fleet) -> None:
    first = _enqueue(fleet, "rerun", "app.work", {"n": 1})
    fleet.until("rerun", first, "completed", WOKEN_WITHIN)
    done = fleet.ket("jobs", "rerun", str(first), "--tenant", "rerun")
    assert done.stdout == f"job {first} rerun as job {first + 1}\n", done.stderr
    fleet.until("rerun", first + 1, "completed", WOKEN_WITHIN)


def test_wake_after_committing_on_the_apps_own_psycopg_connection_wakes_the_worker(
    fleet: Fleet,
) -> None:
    main = _deployment()
    with open_client(main, tenant="conn", database_url=fleet.template) as client:
        with psycopg.connect(fleet.url("conn")) as connection:  # commits at the block's end
            inserted = client.enqueue("app.work", {"n": 1}, connection=connection)
        client.wake(["app.work"])
    fleet.until("conn", inserted.id, "completed", WOKEN_WITHIN)

    async def produce() -> int:
        client = await open_async_client(main, tenant="conn", database_url=fleet.template)
        try:
            async with await psycopg.AsyncConnection.connect(fleet.url("conn")) as connection:
                inserted = await client.aenqueue("app.work", {"n": 2}, connection=connection)
            await client.awake()  # every queue of the deployment
        finally:
            await client.aclose()
        return inserted.id

    fleet.until("conn", asyncio.run(produce()), "completed", WOKEN_WITHIN)
