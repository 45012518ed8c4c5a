"""The example app's jobs on one real `ket worker` over a grid of connection budgets (4, 10, 20)
and tenant counts (1, 40, 200): whatever the budget and however many tenants, every tenant's
jobs run at their first attempt (a wait for room does not count against a job's timeout, and
no more tenants hold running work than their lease renewals keep up with), and the worker never
holds more PostgreSQL connections than its budget (docs/operations.md, Connections).

Each tenant runs, on the worker:
- `grid.place_order`: the example's own `sales.place_order` handler run as a job, so that the
  worker runs its two `ctx.tx` transactions (the order written, then confirmed with its mail and
  invoice enqueued in the same transaction);
- `sales.send_confirmation`, enqueued by it: reads the order with `ctx.db`, sends the mail;
- the two hotel schedules: installed a day ago (their state rows copied in with the tenant's
  database), so the worker's first sweep fires their current tick: `hotel.catch_up` reads
  bookings with `ctx.db`; `hotel.night_audit` reads the company and enqueues one
  `hotel.close_day`, a plain handler that reads and writes models from its thread.
Two tenants (one with a single tenant) also get an order through `ket call sales.place_order`,
whose mail job the worker runs.

A grid row's tenants are copies of one migrated template database (CREATE DATABASE ...
TEMPLATE), registered in a registry of their own, and shared by the row's cells that one test
process runs (each cell puts the jobs and schedules back as they were). The connections are
counted from `pg_stat_activity`: every client backend on this test's databases but the test's
own, which name themselves `ket-test-grid`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from modules_example.company import company
from modules_example.hotel import hotel
from modules_example.sales import sales

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.client import open_async_client
from ket.control.registry import TenantRegistry
from ket.runtime.contexts import install_models
from ket.store.sql import SqlStore

from ..databases import Sampler, create_database, drop_databases

REPO = Path(__file__).resolve().parents[2]
TEST_APP = "ket-test-grid"  # application_name of the test's own connections
BUDGETS = (4, 10, 20)
CALLED = 2  # tenants that also get an order through `ket call`
ENQUEUERS = 8  # the test's own connections placing jobs at once

APP = """
from ket import define_deployment, define_job, define_module
from modules_example.company import company
from modules_example.hotel import hotel
from modules_example.sales import sales
from modules_example.sales.handlers import place_order

# the example's function, run by the worker as a job: its ctx.tx transactions run there
grid = define_module(
    name="grid",
    jobs={
        "place_order": define_job(
            input={"number": "string", "email": "string"},
            effects=[
                "write:sales.Order",
                "enqueue:sales.send_confirmation",
                "enqueue:sales.issue_invoice",
            ],
            idempotent=True,
            handler=place_order,
        )
    },
)
erp = define_deployment(
    name="erp",
    modules=[sales, hotel, company, grid],
    worker={
        "queues": {"default": 2, "mail": 4, "maintenance": 1},
        "poll_min_ms": 50,
        "poll_max_ms": 2_000,
        "tenant_refresh_ms": 30_000,
        "lease_ms": 30_000,
        "shutdown_grace_ms": 15_000,
        "schedule_sweep_ms": 30_000,
    },
)
"""


async def _placed_by_the_worker(ctx: object, input: object) -> None:
    raise AssertionError("the worker runs grid.place_order, with the example's handler")


# the deployment as the test's client sees it: enough to validate grid.place_order's input
CLIENT = define_deployment(
    name="erp",
    modules=[
        sales,
        hotel,
        company,
        define_module(
            name="grid",
            jobs={
                "place_order": define_job(
                    input={"number": "string", "email": "string"},
                    effects=[
                        "write:sales.Order",
                        "enqueue:sales.send_confirmation",
                        "enqueue:sales.issue_invoice",
                    ],
                    idempotent=True,
                    handler=_placed_by_the_worker,
                )
            },
        ),
    ],
    worker={"queues": {"default": 2, "mail": 4, "maintenance": 1}},
)
SCHEDULED = ("hotel.catch_up", "hotel.night_audit")
# every job a tenant runs to completion (a called tenant: send_confirmation twice)
RUN = ("grid.place_order", "sales.send_confirmation", *SCHEDULED, "hotel.close_day")


@dataclass
class Grid:
    """One grid row's databases: a registry and `count` tenant databases on the local server."""

    admin: str
    prefix: str
    root: Path
    tenants: list[str] = field(default_factory=list)

    def url(self, database: str) -> str:
        base = self.admin.rsplit("/", 1)[0]
        return f"{base}/{self.prefix}{database}?application_name={TEST_APP}"

    @property
    def called(self) -> list[str]:
        return self.tenants[-CALLED:]

    def environment(self, **extra: str) -> dict[str, str]:
        base = self.admin.rsplit("/", 1)[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KET_", "PGAPPNAME"))}
        env.update(
            KET_DATABASE_URL=f"{base}/{self.prefix}{{tenant}}",
            KET_REGISTRY_URL=f"{base}/{self.prefix}registry",
            PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def jobs(self, tenant: str) -> list[tuple[str, str, int]]:
        """The tenant's jobs as (name, state, attempt), in id order."""
        with psycopg.connect(self.url(tenant)) as connection:
            rows = connection.execute("SELECT name, state, attempt FROM ket_jobs ORDER BY id")
            return [(row[0], row[1], row[2]) for row in rows.fetchall()]

    def connections(self) -> int:
        """Client backends on this row's databases but the test's own."""
        with psycopg.connect(self.admin, autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname LIKE %s "
                "AND backend_type = 'client backend' AND application_name <> %s",
                (self.prefix.replace("_", r"\_") + "%", TEST_APP),
            ).fetchone()
        return int(row[0]) if row else 0


def _done(jobs: list[tuple[str, str, int]], called: bool) -> bool:
    completed = [name for name, state, _ in jobs if state == "completed"]
    mails = 2 if called else 1
    return (
        all(name in completed for name in RUN)
        and completed.count("sales.send_confirmation") == mails
    )


async def _migrate_template(url: str) -> None:
    """ket's tables, the app's models, one company, and the hotel schedules installed a day
    ago (so that a worker's first sweep fires their current tick)."""
    catalog = Catalog.build(CLIENT)
    store = await SqlStore.open(url, migrate=True)
    try:
        await install_models(store, catalog)
        await store.record_insert("company.Company", {"name": "Saigon Inn", "code": "SGN"})
    finally:
        await store.close()
    with psycopg.connect(url, autocommit=True) as connection:
        for name in SCHEDULED:
            schedule = catalog.job(name).schedule
            assert schedule is not None
            connection.execute(
                "INSERT INTO ket_schedules (schedule_id, fingerprint, last_tick, updated_at) "
                "VALUES (%s, %s, now() - interval '1 day', now())",
                (name, schedule.fingerprint),
            )


TENANTS = [1, 40, 200]


@pytest.fixture(scope="module", params=TENANTS)
def grid(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, postgres_url: str
) -> Iterator[Grid]:
    count: int = request.param
    root = tmp_path_factory.mktemp(f"grid{count}")
    (root / "app.py").write_text(textwrap.dedent(APP))
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    made = Grid(admin=postgres_url, prefix=f"ket_grid_{uuid.uuid4().hex[:8]}_", root=root)
    names: list[str] = []
    try:
        for name in ("template", "registry"):
            create_database(postgres_url, made.prefix + name)
            names.append(made.prefix + name)
        asyncio.run(_migrate_template(made.url("template")))
        made.tenants.extend(f"t{number:03d}" for number in range(count))
        names.extend(made.prefix + tenant for tenant in made.tenants)  # dropped if made
        template = made.prefix + "template"
        with ThreadPoolExecutor(8) as pool:  # copies of one template, several at once
            for done in [
                pool.submit(create_database, postgres_url, made.prefix + t, template)
                for t in made.tenants
            ]:
                done.result()
        registry = TenantRegistry(made.environment()["KET_REGISTRY_URL"])
        try:
            for tenant in made.tenants:
                registry.add(tenant)
        finally:
            registry.close()
        yield made
    finally:
        drop_databases(postgres_url, names)


def _reset(grid: Grid) -> None:
    """Each tenant as the template left it: no jobs, the schedules' last tick a day ago."""
    for tenant in grid.tenants:
        with psycopg.connect(grid.url(tenant), autocommit=True) as connection:
            connection.execute("DELETE FROM ket_jobs")
            connection.execute("UPDATE ket_schedules SET last_tick = now() - interval '1 day'")


async def _place_orders(grid: Grid) -> None:
    """A grid.place_order job in every tenant, through the application's client (which wakes
    the worker), a few tenants at a time."""
    template = grid.environment()["KET_DATABASE_URL"] + f"?application_name={TEST_APP}"
    gate = asyncio.Semaphore(ENQUEUERS)

    async def place(tenant: str) -> None:
        async with gate:
            client = await open_async_client(CLIENT, tenant=tenant, database_url=template)
            try:
                await client.aenqueue(
                    "grid.place_order", {"number": tenant, "email": f"{tenant}@example.com"}
                )
            finally:
                await client.aclose()

    await asyncio.gather(*[place(tenant) for tenant in grid.tenants])


def _wait_for_every_tenant(grid: Grid, timeout: float, log: Path) -> None:
    """Until every tenant ran its jobs; AssertionError naming those that did not within
    `timeout` seconds.

    One tenant is asked at a time, the first still waiting, until it has run them: asking every
    waiting tenant on each round opened a connection per tenant every round (about 100 a
    second at 200 tenants), and each new PostgreSQL backend took CPU from the worker measured.
    """
    waiting = list(grid.tenants)
    deadline = time.monotonic() + timeout
    while waiting:
        while waiting and _done(grid.jobs(waiting[0]), waiting[0] in grid.called):
            waiting.pop(0)
        if not waiting:
            return
        if time.monotonic() > deadline:
            waiting = [t for t in waiting if not _done(grid.jobs(t), t in grid.called)]
            if not waiting:
                return
            shown = {t: grid.jobs(t) for t in waiting[:3]}
            raise AssertionError(
                f"{len(waiting)} of {len(grid.tenants)} tenants did not run their jobs within "
                f"{timeout:g} s, e.g. {shown}\n{log.read_text()[-4000:]}"
            )
        time.sleep(0.5)


@pytest.mark.parametrize("limit", BUDGETS)
def test_a_worker_runs_every_tenants_jobs_within_its_connection_budget(
    grid: Grid, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One test per cell: the test runner may run a row's cells in several of its processes
    side by side (each then makes the row's databases for itself: a 200-tenant cell at a
    budget of 4 takes minutes, its row's copies 15 s), or one after another on one set."""
    # the client finds the control database as the worker does; its connections are the test's
    registry = grid.environment()["KET_REGISTRY_URL"]
    monkeypatch.setenv("KET_REGISTRY_URL", f"{registry}?application_name={TEST_APP}")
    _cell(grid, limit)


def _cell(grid: Grid, limit: int) -> None:
    _reset(grid)
    log = grid.root / f"worker-{limit}.log"
    ket = [sys.executable, "-m", "ket.cli.main"]
    begun = time.monotonic()
    with Sampler(grid.connections, every=0.05) as sampler:
        with log.open("w") as sink:
            worker = subprocess.Popen(
                [*ket, "worker", "--max-connections", str(limit)],
                cwd=grid.root,
                env=grid.environment(),
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            asyncio.run(_place_orders(grid))
            # and a couple through `ket call`, in a process of its own, as an operator would
            for tenant in grid.called:
                order = f'{{"number": "call-{tenant}", "email": "{tenant}@example.com"}}'
                called = subprocess.run(
                    [*ket, "call", "sales.place_order", order, "--tenant", tenant],
                    cwd=grid.root,
                    env=grid.environment(PGAPPNAME=TEST_APP),
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                assert called.returncode == 0, called.stderr
            # generous: only so that a wedged worker fails the test instead of hanging it
            _wait_for_every_tenant(grid, 120 + 1.5 * len(grid.tenants), log)
            seconds = time.monotonic() - begun
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
    text = log.read_text()
    sys.stderr.write(
        f"\ngrid cell: {len(grid.tenants)} tenants at --max-connections {limit}: every job "
        f"run in {seconds:.1f} s; at most {max(sampler.samples)} connections\n"
    )
    assert code == 0, text[-3000:]
    # every job ran once, at its first attempt: none waited for a connection until it failed
    for tenant in grid.tenants:
        jobs = grid.jobs(tenant)
        assert all(attempt == 1 for _, state, attempt in jobs if state == "completed"), jobs
        assert {state for _, state, _ in jobs} <= {"completed", "scheduled"}, (tenant, jobs)
        assert [n for n, state, _ in jobs if state == "scheduled"] == ["sales.issue_invoice"] * (
            2 if tenant in grid.called else 1
        ), (tenant, jobs)
    # the documented bound: pg_stat_activity never shows a worker with more than its budget
    assert max(sampler.samples) <= limit, (max(sampler.samples), text[-3000:])
    assert "Traceback" not in text, text[-3000:]
