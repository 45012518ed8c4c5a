"""Many tenants with work, a small budget and a costly connection: a real `ket worker` claims no
more tenants' work than its budget can keep the leases of, and no job runs twice.

Seen in issue 26: 200 tenants at `--max-connections 4`, on a machine busy enough that each
connection took long to open. Every tenant claimed its jobs at once; the one lane connection
the budget left moved among 200 databases (each move a close and an open) too slowly to renew
every tenant's leases each third of a lease, and 40 attempts lost theirs (their jobs ran again).

Here the tenants' databases sit behind a proxy that holds every new connection for
CONNECT_DELAY seconds (a server far away, a slow handshake), the lease is short (a heartbeat
each second), and every tenant has jobs that outlast a heartbeat interval. The worker must
admit tenants as fast as its budget can keep their leases: every job completes at its first
attempt, and the side-effect log shows each started once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from pathlib import Path

import psycopg

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.control.registry import TenantRegistry
from ket.store.sql import SqlStore
from tests.databases import create_database, drop_databases
from tests.faults.fleet import until
from tests.faults.proxy import Proxy

TENANTS = 20
JOBS = 3  # per tenant, run at once (the queue's concurrency)
CONNECT_DELAY = 0.5
BUDGET = 4
LEASE_MS = 3_000  # a renewal every second
WORK_SECONDS = 4.0  # each job: longer than a heartbeat interval

APP = f"""
import asyncio, os
from ket import define_deployment, define_job, define_module

async def slow(ctx, input):
    with open(os.environ["KET_TEST_STARTS"], "a") as log:
        log.write(f"{{ctx.tenant}} {{ctx.job.id}} {{ctx.job.attempt}}\\n")
    await asyncio.sleep({WORK_SECONDS})

app = define_module(
    name="app", jobs={{"slow": define_job(input={{"n": "int"}}, idempotent=True, handler=slow)}}
)
main = define_deployment(
    name="main", modules=[app],
    worker={{"queues": {{"default": {JOBS}}}, "lease_ms": {LEASE_MS},
             "poll_min_ms": 50, "poll_max_ms": 1000}},
)
"""


async def _never(ctx: object, input: object) -> None:
    raise AssertionError("the worker runs it")


CLIENT = define_deployment(
    name="main",
    modules=[
        define_module(
            name="app",
            jobs={"slow": define_job(input={"n": "int"}, idempotent=True, handler=_never)},
        )
    ],
)


def test_a_worker_admits_no_more_tenants_than_its_budget_keeps_the_leases_of(
    postgres_url: str, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    (tmp_path / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    prefix = f"ket_admit_{uuid.uuid4().hex[:8]}_"
    tenants = [f"t{n:02d}" for n in range(TENANTS)]
    names = [prefix + name for name in ("template", "registry", *tenants)]
    base = postgres_url.rsplit("/", 1)[0]
    try:
        for name in names[:2]:
            create_database(postgres_url, name)
        asyncio.run(_migrate(f"{base}/{prefix}template"))
        for tenant in tenants:
            create_database(postgres_url, prefix + tenant, prefix + "template")
            asyncio.run(_enqueue(f"{base}/{prefix}{tenant}"))
        registry = TenantRegistry(f"{base}/{prefix}registry")
        try:
            for tenant in tenants:
                registry.add(tenant)
        finally:
            registry.close()
        with Proxy(("127.0.0.1", 5432), connect_delay=CONNECT_DELAY) as proxy:
            _serve(tmp_path, base, prefix, tenants, proxy.port)
    finally:
        drop_databases(postgres_url, names)


def _serve(root: Path, base: str, prefix: str, tenants: list[str], port: int) -> None:
    starts = root / "starts.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KET_", "PGAPPNAME"))}
    env.update(
        # the tenants' databases through the proxy; the control database directly
        KET_DATABASE_URL=f"postgresql://root@127.0.0.1:{port}/{prefix}{{tenant}}",
        KET_REGISTRY_URL=f"{base}/{prefix}registry",
        KET_TEST_STARTS=str(starts),
        PYTHONUNBUFFERED="1",
    )
    log = root / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker", "--max-connections", str(BUDGET)],
            cwd=root,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        until(
            lambda: all(_states(base, prefix, t) == ["completed"] * JOBS for t in tenants),
            120,
            "every tenant's jobs to complete",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    started = Counter(line.rsplit(" ", 1)[0] for line in starts.read_text().splitlines())
    twice = {job: count for job, count in started.items() if count > 1}
    assert not twice, f"jobs started more than once: {twice}\n{text[-3000:]}"
    assert len(started) == TENANTS * JOBS
    attempts = {t: _attempts(base, prefix, t) for t in tenants}
    assert all(found == [1] * JOBS for found in attempts.values()), (attempts, text[-3000:])
    assert "lease lost" not in text and "heartbeats are failing" not in text, text[-3000:]


async def _migrate(url: str) -> None:
    store = await SqlStore.open(url, migrate=True)
    await store.close()


async def _enqueue(url: str) -> None:
    catalog = Catalog.build(CLIENT)
    store = await SqlStore.open(url)
    try:
        await store.job_insert([catalog.new_job("app.slow", {"n": n}) for n in range(JOBS)])
    finally:
        await store.close()


def _states(base: str, prefix: str, tenant: str) -> list[str]:
    with psycopg.connect(f"{base}/{prefix}{tenant}") as connection:
        rows = connection.execute("SELECT state FROM ket_jobs ORDER BY id").fetchall()
    return [row[0] for row in rows]


def _attempts(base: str, prefix: str, tenant: str) -> list[int]:
    with psycopg.connect(f"{base}/{prefix}{tenant}") as connection:
        rows = connection.execute("SELECT attempt FROM ket_jobs ORDER BY id").fetchall()
    return [row[0] for row in rows]
