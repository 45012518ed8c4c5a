"""The control database away while two `ket worker` processes share twenty tenants.

The tenant databases stay reachable; only the registry's database (the control database: the
tenant registry, the workers' roster, the wake channel's LISTEN) sits behind the fault proxy,
which refuses every connection for OUTAGE_SECONDS (existing ones are reset, as when the server
restarts or its host goes away). Two things must hold (issue 26):

- idle queues notice that their wake channel died and poll (every `poll_max_ms`) until it is
  back: jobs that an application enqueues into tenants meanwhile, through clients opened
  before the outage whose hints to the control database fail, start within about a second,
  not at the tenant's next safety visit or after the outage;
- at recovery neither worker takes the other for dead because it could not see its reports
  during the outage: no worker ever serves all twenty tenants, and no tenant changes hands.

Before the fixes the jobs waited for the listener's reconnect at the end of the outage (7.5-8.9 s
with an 8 s outage) or for the tenant's safety visit, and the first worker to report after the
outage served all twenty tenants until its peer's next report; with the grace alone, a peer
whose failing reports had been backed off past it was still taken for dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ket import open_client
from ket.client import Client
from ket.control.registry import TenantRegistry
from ket.store.sql import SqlStore

from ..databases import create_database, drop_databases
from ..processes import stop_processes
from .proxy import Proxy

TENANTS = [f"t{n:02d}" for n in range(20)]
BUSY = TENANTS[::4]  # the tenants that get a job during the outage (5 of them)
LEASE_MS = 3_000  # a presence report every second; stale after three seconds without one
# As long as the issue's: a worker's failing reports were backed off (doubling up to 30 s), so
# after 20 s its next report came up to 16 s after the control database was back, and its peer
# took it for dead though it gave it three intervals' grace. An 8 s outage shows the other two
# faults as well, but not that one reliably.
OUTAGE_SECONDS = 20.0
STARTS_WITHIN = timedelta(seconds=2.0)  # poll_max_ms is 200 ms: "soon", not "at the next visit"
APP = f"""
from ket import define_deployment, define_job, define_module

async def work(ctx, input):
    pass

app = define_module(name="app", jobs={{"work": define_job(idempotent=True, handler=work)}})
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 2}}, "poll_min_ms": 20, "poll_max_ms": 200, "lease_ms": {LEASE_MS},
}})
"""
SHARE_LINE = re.compile(r"this worker serves (\d+) of (\d+) tenants, shared among (\d+) worker")


class Deployment:
    """Twenty migrated tenant databases and a registry database listing them, on the server the
    tests use; the registry reached through the fault proxy."""

    def __init__(self, server: str, root: Path) -> None:
        self.server = server
        self.root = root
        self.prefix = f"ket_ctl_{uuid.uuid4().hex[:8]}"
        self.created: list[str] = []
        self.proxy_port = 0
        namespace: dict[str, Any] = {}
        exec(APP, namespace)
        self.declared = namespace["main"]

    def url(self, database: str, **query: str) -> str:
        options = "&".join(f"{key}={value}" for key, value in query.items())
        return f"{self.server.rsplit('/', 1)[0]}/{database}" + (f"?{options}" if options else "")

    def template(self, **query: str) -> str:
        return self.url(f"{self.prefix}_{{tenant}}", **query)

    def registry(self) -> str:
        """The registry's URL through the proxy: the workers' and clients' control database."""
        direct = self.url(f"{self.prefix}_registry")
        return direct.replace(":5432/", f":{self.proxy_port}/")

    def create(self) -> None:
        seed = f"{self.prefix}_{TENANTS[0]}"
        self._create(seed)

        async def migrate() -> None:
            await (await SqlStore.open(self.url(seed), migrate=True)).close()

        asyncio.run(migrate())
        for name in TENANTS[1:]:  # copies of the first, migrated: quicker than migrating each
            self._create(f"{self.prefix}_{name}", template=seed)
        self._create(f"{self.prefix}_registry")
        registry = TenantRegistry(self.url(f"{self.prefix}_registry"))
        try:
            for name in TENANTS:
                registry.add(name, template=self.template())
        finally:
            registry.close()
        (self.root / "app").mkdir(parents=True)
        (self.root / "app" / "__init__.py").write_text("")
        (self.root / "app" / "workspace.py").write_text(textwrap.dedent(APP))
        (self.root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')

    def drop(self) -> None:
        drop_databases(self.server, self.created)

    def environment(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.template(), KET_REGISTRY_URL=self.registry(), PYTHONUNBUFFERED="1"
        )
        env.update(extra)
        return env

    def clients(self, names: list[str]) -> list[Client]:
        """A client per tenant, opened now (opening one reads the registry); each hints the
        workers on the control database after its enqueues."""
        saved = os.environ.get("KET_REGISTRY_URL")
        os.environ["KET_REGISTRY_URL"] = self.registry()
        try:
            return [
                open_client(self.declared, tenant=name, database_url=self.template())
                for name in names
            ]
        finally:
            if saved is None:
                os.environ.pop("KET_REGISTRY_URL", None)
            else:
                os.environ["KET_REGISTRY_URL"] = saved

    def jobs(self, name: str) -> list[tuple[int, str, Any, Any]]:
        """(id, state, enqueued_at, attempted_at) of every job of tenant `name`."""
        with psycopg.connect(self.url(f"{self.prefix}_{name}")) as connection:
            rows = connection.execute(
                "SELECT id, state, enqueued_at, attempted_at FROM ket_jobs ORDER BY id"
            ).fetchall()
        return [(int(r[0]), str(r[1]), r[2], r[3]) for r in rows]

    def _create(self, name: str, template: str | None = None) -> None:
        create_database(self.server, name, template)
        self.created.append(name)


class Workers:
    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.processes: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        number = len(self.processes)
        env = self.deployment.environment(
            KET_DATABASE_URL=self.deployment.template(application_name=f"ket-w{number}")
        )
        with self.log(number).open("w") as output:
            self.processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "INFO"],
                    cwd=self.deployment.root,
                    env=env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )

    def log(self, number: int) -> Path:
        return self.deployment.root / f"worker-{number}.log"

    def text(self, number: int) -> str:
        return self.log(number).read_text(errors="replace")

    def shares(self, since: list[int] | None = None) -> list[list[tuple[int, int, int]]]:
        """Each worker's share lines (served, tenants, workers), from offset `since[n]` on."""
        found = []
        for number in range(len(self.processes)):
            text = self.text(number)[since[number] if since else 0 :]
            found.append([(int(a), int(b), int(c)) for a, b, c in SHARE_LINE.findall(text)])
        return found

    def report(self) -> str:
        return "\n".join(
            f"--- worker {n} (exit {p.poll()}):\n{self.text(n)[-5_000:]}"
            for n, p in enumerate(self.processes)
        )

    def stop(self) -> None:
        stop_processes(self.processes)


@pytest.fixture
def deployment(postgres_url: str, tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(postgres_url, tmp_path)
    try:
        made.create()
        yield made
    finally:
        made.drop()


def _until(condition: Callable[[], bool], timeout: float, what: str, workers: Workers) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{workers.report()}")


def test_idle_queues_poll_while_the_control_database_is_away_and_no_peer_is_taken_for_dead(
    deployment: Deployment, postgres_url: str
) -> None:
    with Proxy(("127.0.0.1", 5432)) as proxy:
        deployment.proxy_port = proxy.port
        workers = Workers(deployment)
        clients: list[Client] = []
        try:
            workers.start()
            workers.start()

            def settled() -> bool:
                last = [lines[-1] if lines else None for lines in workers.shares()]
                return all(s is not None and s[2] == 2 for s in last) and sum(
                    s[0] for s in last if s is not None
                ) == len(TENANTS)

            _until(settled, 30, "the two workers to share the tenants", workers)
            clients = deployment.clients(BUSY)
            for client in clients:  # served before the outage, woken by the hint
                client.enqueue("app.work")
            _until(
                lambda: all(
                    [s for _, s, _, _ in deployment.jobs(n)] == ["completed"] for n in BUSY
                ),
                10,
                "the jobs enqueued before the outage",
                workers,
            )
            time.sleep(2.0)  # every queue back in its long wait for a hint
            offsets = [len(workers.text(n)) for n in range(2)]

            proxy.set_mode("refuse")
            cut_at = time.monotonic()
            time.sleep(1.0)
            for client in clients:  # the tenant database answers; the hint cannot go out
                client.enqueue("app.work")
            while time.monotonic() - cut_at < OUTAGE_SECONDS:
                time.sleep(0.1)
            during = {name: deployment.jobs(name)[1][1] for name in BUSY}
            proxy.set_mode("pass")
            back_at = time.monotonic()
            # both report again within a few seconds; their roster rows, sampled meanwhile
            fresh: list[int] = []
            while time.monotonic() - back_at < 8.0:
                listed = subprocess.run(
                    [sys.executable, "-m", "ket.cli.main", "workers", "list", "--format", "json"],
                    cwd=deployment.root,
                    env=deployment.environment(),
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                if listed.returncode == 0:
                    rows = json.loads(listed.stdout)["workers"]
                    fresh.append(sum(1 for row in rows if not row["stale"]))
            # what each worker said it serves from the outage on
            took_all = [
                (number, line)
                for number, lines in enumerate(workers.shares(offsets))
                for line in lines
                if line[0] == len(TENANTS)
            ]
            _until(
                lambda: all(
                    [s for _, s, _, _ in deployment.jobs(n)] == ["completed"] * 2 for n in BUSY
                ),
                10,
                "the jobs enqueued during the outage to complete",
                workers,
            )
            waits = {
                name: jobs[1][3] - jobs[1][2] for name in BUSY if (jobs := deployment.jobs(name))
            }
            late = {name: str(wait) for name, wait in waits.items() if wait > STARTS_WITHIN}
            assert not late and set(during.values()) == {"completed"}, (
                f"jobs enqueued while the control database was away waited to start: {late} "
                f"(states at the end of the outage: {during})\n{workers.report()}"
            )
            assert not took_all, (
                f"after the outage a worker took every tenant, its peer for dead: {took_all}\n"
                f"{workers.report()}"
            )
            assert fresh and fresh[-1] == 2, (fresh, workers.report())
            for number in range(2):
                after = workers.text(number)[offsets[number] :]
                assert "serving tenant" not in after, workers.report()
                assert "now served by other workers" not in after, workers.report()
                assert "idle queues poll until it is back" in after, workers.report()
            # the first to read the roster again found its peer's row stale, and waited for it
            said = "\n".join(workers.text(number)[offsets[number] :] for number in range(2))
            assert "have time to report again" in said, workers.report()

            slowest = max(waits.values()).total_seconds()
            print(f"jobs enqueued during the outage started within {slowest:.2f}s")

            # and the wake channel is back: a job enqueued now, with its hint, runs at once
            for client in clients:
                client.enqueue("app.work")
            _until(
                lambda: all(
                    [s for _, s, _, _ in deployment.jobs(n)] == ["completed"] * 3 for n in BUSY
                ),
                10,
                "the jobs enqueued after the outage",
                workers,
            )
        finally:
            for client in clients:
                with contextlib.suppress(Exception):
                    client.close()
            workers.stop()
    assert [process.returncode for process in workers.processes] == [0, 0], workers.report()
