"""Tenants on two PostgreSQL servers, one control database (issue 26): a `ket worker` serves
both, holds at most its budget on each server, and when one server goes away the other's
tenants go on being served; the lost server's tenants are served again once it is back.

Server A is the one the tests use; server B a private cluster of the test's own (cluster.py),
on another port. The registry (the control database) is on A. Six tenants live on A, through
the registry's template, and six on B, each registered with its own database URL.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ket import open_client
from ket.control.registry import TenantRegistry
from ket.store.sql import SqlStore

from ..databases import Sampler, create_database, drop_databases, held_by
from .cluster import PrivateCluster

ON_A = [f"a{n}" for n in range(6)]
ON_B = [f"b{n}" for n in range(6)]
DUE_IN = 3.0  # seconds: a job of server B's that comes due while B is away
BUDGET = 6  # per server: fewer than the 12 tenants' engines and lanes would take at once
APP = """
from ket import define_deployment, define_job, define_module

async def work(ctx, input):
    pass

app = define_module(name="app", jobs={"work": define_job(idempotent=True, handler=work)})
main = define_deployment(name="main", modules=[app], worker={
    "queues": {"default": 2}, "poll_min_ms": 20, "poll_max_ms": 500, "lease_ms": 5_000,
    "tenant_refresh_ms": 2_000,
})
"""
WORKER_APP = "ket-two-servers"  # the worker's application_name, on both servers


class TwoServers:
    """The tenant databases on both servers and the registry listing them."""

    def __init__(self, a: str, b: str, root: Path) -> None:
        self.servers = {"a": a, "b": b}
        self.root = root
        self.prefix = f"ket_two_{uuid.uuid4().hex[:8]}"
        self.created: list[tuple[str, str]] = []
        namespace: dict[str, Any] = {}
        exec(APP, namespace)
        self.declared = namespace["main"]

    def url(self, server: str, database: str, **query: str) -> str:
        options = "&".join(f"{key}={value}" for key, value in query.items())
        base = self.servers[server].rsplit("/", 1)[0]
        return f"{base}/{database}" + (f"?{options}" if options else "")

    def tenant_url(self, name: str) -> str:
        return self.url(name[0], f"{self.prefix}_{name}")

    def template(self) -> str:
        return self.url("a", f"{self.prefix}_{{tenant}}")

    def registry(self) -> str:
        return self.url("a", f"{self.prefix}_registry")

    def create(self) -> None:
        for server, names in (("a", ON_A), ("b", ON_B)):
            seed = f"{self.prefix}_{names[0]}"
            self._create(server, seed)

            async def migrate(url: str) -> None:
                await (await SqlStore.open(url, migrate=True)).close()

            asyncio.run(migrate(self.url(server, seed)))
            for name in names[1:]:
                self._create(server, f"{self.prefix}_{name}", template=seed)
        self._create("a", f"{self.prefix}_registry")
        registry = TenantRegistry(self.registry())
        try:
            for name in ON_A:
                registry.add(name, template=self.template())
            for name in ON_B:
                registry.add(name, self.tenant_url(name), template=self.template())
        finally:
            registry.close()
        (self.root / "app").mkdir(parents=True)
        (self.root / "app" / "__init__.py").write_text("")
        (self.root / "app" / "workspace.py").write_text(textwrap.dedent(APP))
        (self.root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')

    def drop(self, up: Callable[[str], bool]) -> None:
        for server in self.servers:
            if up(server):
                drop_databases(self.servers[server], [n for s, n in self.created if s == server])

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.template(),
            KET_REGISTRY_URL=self.registry(),
            PGAPPNAME=WORKER_APP,
            PYTHONUNBUFFERED="1",
        )
        return env

    def enqueue(self, name: str, run_in: float | None = None) -> int:
        saved = os.environ.get("KET_REGISTRY_URL")
        os.environ["KET_REGISTRY_URL"] = self.registry()
        try:
            with open_client(self.declared, tenant=name, database_url=self.template()) as client:
                return client.enqueue("app.work", run_in=run_in).id
        finally:
            if saved is None:
                os.environ.pop("KET_REGISTRY_URL", None)
            else:
                os.environ["KET_REGISTRY_URL"] = saved

    def state(self, name: str, job_id: int) -> str | None:
        try:
            with psycopg.connect(self.tenant_url(name), connect_timeout=3) as connection:
                row = connection.execute("SELECT state FROM ket_jobs WHERE id = %s", (job_id,))
                found = row.fetchone()
        except psycopg.OperationalError:
            return None
        return None if found is None else str(found[0])

    def connections(self, server: str) -> int:
        """The worker's client backends on `server` now."""
        return held_by(self.servers[server], WORKER_APP)

    def _create(self, server: str, name: str, template: str | None = None) -> None:
        create_database(self.servers[server], name, template)
        self.created.append((server, name))


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    # commits durable, as on a real server: the test crashes it (an immediate stop), and the
    # private cluster's defaults (fsync and synchronous_commit off) would lose the last ones
    with PrivateCluster(max_connections=40, fsync="on", synchronous_commit="on") as made:
        yield made


@pytest.fixture
def servers(postgres_url: str, cluster: PrivateCluster, tmp_path: Path) -> Iterator[TwoServers]:
    made = TwoServers(postgres_url, cluster.url("postgres"), tmp_path)
    try:
        made.create()
        yield made
    finally:
        made.drop(lambda server: server == "a" or cluster.running())


def _until(condition: Callable[[], bool], timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    text = log.read_text(errors="replace")[-6_000:]
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{text}")


def test_a_worker_serves_tenants_on_two_servers_and_goes_on_when_one_is_lost(
    servers: TwoServers, cluster: PrivateCluster
) -> None:
    log = servers.root / "worker.log"
    up = {"a": True, "b": True}
    command = [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "INFO"]
    with log.open("w") as output:
        worker = subprocess.Popen(
            [*command, "--max-connections", str(BUDGET)],
            cwd=servers.root,
            env=servers.environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:

        def on_each() -> dict[str, int]:  # the worker's connections on each server that is up
            return {server: servers.connections(server) for server in up if up[server]}

        with Sampler(on_each, every=0.2) as sampler:
            _until(
                lambda: log.read_text().count("serving tenant") >= len(ON_A) + len(ON_B),
                60,
                "the worker to serve every tenant on both servers",
                log,
            )
            first = {name: servers.enqueue(name) for name in ON_A + ON_B}
            _until(
                lambda: all(servers.state(n, i) == "completed" for n, i in first.items()),
                30,
                "a job in every tenant on both servers",
                log,
            )
            # a job of server B's comes due while it is away: the worker tries it, and fails
            due = servers.enqueue(ON_B[0], run_in=DUE_IN)
            # server B goes away at once, as a crashed host would
            cluster.stop(mode="immediate")
            up["b"] = False
            lost_at = time.monotonic()
            time.sleep(1.0)
            during = {name: servers.enqueue(name) for name in ON_A}
            _until(
                lambda: all(servers.state(n, i) == "completed" for n, i in during.items()),
                20,
                "the jobs of server A's tenants while server B is away",
                log,
            )
            served_within = time.monotonic() - lost_at
            cluster.start()
            up["b"] = True
            _until(
                lambda: cluster.running(),
                20,
                "server B to come back",
                log,
            )
            after = {name: servers.enqueue(name) for name in ON_B}
            after[f"{ON_B[0]} (due while away)"] = due
            _until(
                lambda: all(servers.state(n[:2], i) == "completed" for n, i in after.items()),
                60,
                "the jobs of server B's tenants once it is back",
                log,
            )
        text = log.read_text(errors="replace")
        most = {s: max(sample.get(s, 0) for sample in sampler.samples) for s in servers.servers}
        # the budget holds on each server, and the failure is named in the log
        assert most["a"] <= BUDGET and most["b"] <= BUDGET, (most, text[-6_000:])
        assert most["b"] > 0, most
        # the worker said which tenant's work failed, and on which server
        failed = [line for line in text.splitlines() if re.search(r" (ERROR|WARNING) ", line)]
        assert any(ON_B[0] in line for line in failed), text[-6_000:]
        assert not any(name in line for line in failed for name in ON_A), text[-6_000:]
        print(f"server A's tenants served {served_within:.1f}s after server B was lost")
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)
            raise AssertionError("the worker did not stop within 30 s of SIGTERM") from None
    assert code == 0, log.read_text(errors="replace")[-6_000:]
