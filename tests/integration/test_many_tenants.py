"""Many tenant databases on one PostgreSQL server, served by a real `ket worker` process within
its connection budget, woken through the one control channel.

The tenant databases are copies of one migrated template (CREATE DATABASE ... TEMPLATE), the
registry is a PostgreSQL database of the test's own, and the connections are counted from
`pg_stat_activity`: every client backend on this test's databases but the test's own, which
name themselves `ket-test`.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket import define_deployment, define_job, define_module
from ket.client import open_async_client
from ket.control.registry import TenantRegistry
from ket.store.sql import SqlStore
from tests.databases import drop_databases
from tests.faults.fleet import until

TENANTS = 30
BUDGET = 6
IDLE_SECONDS = 10
TEST_APP = "ket-test"  # application_name of the test's own connections

APP = """
from ket import define_deployment, define_job, define_module

async def ping(ctx, input):
    return None

app = define_module(
    name="app",
    jobs={"ping": define_job(input={"n": "int"}, idempotent=True, handler=ping)},
)
# a poll this slow shows that jobs start because of a wake-up, not a poll
main = define_deployment(
    name="main",
    modules=[app],
    worker={"queues": {"default": 2}, "poll_min_ms": 30000, "poll_max_ms": 30000},
)
"""
# the same app polling fast: the claim loops' backoff after a refused connection starts there
FAST_APP = APP.replace('"poll_min_ms": 30000, "poll_max_ms": 30000', '"poll_max_ms": 500')
ROLE_LIMIT = 3  # the role's CONNECTION LIMIT in the refusal test: below the worker's budget
ping = define_job(input={"n": "int"}, idempotent=True, handler=lambda ctx, input: None)
DEPLOYMENT = define_deployment(
    name="main", modules=[define_module(name="app", jobs={"ping": ping})]
)


@dataclass
class Server:
    """This test's databases: a registry and TENANTS tenant databases, on the local server."""

    admin: str
    prefix: str
    root: Path
    tenants: list[str] = field(default_factory=list)

    def url(self, database: str, *, driver: str = "postgresql") -> str:
        base = self.admin.rsplit("/", 1)[0].replace("postgresql://", f"{driver}://", 1)
        return f"{base}/{self.prefix}{database}?application_name={TEST_APP}"

    @property
    def role(self) -> str:
        return f"{self.prefix}role"

    @property
    def template(self) -> str:
        return self.admin.rsplit("/", 1)[0] + f"/{self.prefix}{{tenant}}"

    def environment(self, *, as_role: bool = False) -> dict[str, str]:
        """The worker's environment; `as_role`: connecting as the test's limited role."""
        base = self.admin.rsplit("/", 1)[0]
        if as_role:
            base = base.replace("//root@", f"//{self.role}@", 1)
            assert self.role in base, base
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=f"{base}/{self.prefix}{{tenant}}",
            KET_REGISTRY_URL=f"{base}/{self.prefix}registry",
        )
        return env

    def states(self) -> dict[str, list[tuple[str, int]]]:
        """Each tenant's jobs as (state, attempt), by id."""
        found = {}
        for tenant in self.tenants:
            with psycopg.connect(self.url(tenant)) as connection:
                rows = connection.execute(
                    "SELECT state, attempt FROM ket_jobs ORDER BY id"
                ).fetchall()
            found[tenant] = [(row[0], row[1]) for row in rows]
        return found

    def worker_connections(self) -> list[tuple[str, str, str]]:
        """(database, query, application name) of every connection to this test's databases but
        the test's."""
        with psycopg.connect(self.admin, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT datname, query, application_name FROM pg_stat_activity "
                "WHERE datname LIKE %s AND backend_type = 'client backend' "
                "AND application_name <> %s",
                (self.prefix + "%", TEST_APP),
            ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def transactions(self) -> int:
        """Transactions committed so far in this test's tenant databases."""
        with psycopg.connect(self.admin, autocommit=True) as connection:
            row = connection.execute(
                "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database "
                "WHERE datname LIKE %s AND datname NOT LIKE %s",
                (self.prefix + "t%", self.prefix + "template"),
            ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    def finished(self) -> dict[str, int]:
        counts = {}
        for tenant in self.tenants:
            with psycopg.connect(self.url(tenant)) as connection:
                row = connection.execute(
                    "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
                ).fetchone()
                counts[tenant] = row[0] if row else 0
        return counts


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, postgres_url: str) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("many_tenants")
    (root / "app.py").write_text(textwrap.dedent(APP))
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    made = Server(admin=postgres_url, prefix=f"ket_many_{uuid.uuid4().hex[:8]}_", root=root)
    names: list[str] = []
    try:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            for name in ("template", "registry"):
                admin.execute(
                    sql.SQL("CREATE DATABASE {}").format(sql.Identifier(made.prefix + name))
                )
                names.append(made.prefix + name)

            async def migrate() -> None:
                store = await SqlStore.open(made.url("template"), migrate=True)
                await store.close()

            asyncio.run(migrate())
            # a role of limited connections for the refusal test, allowed ket's tables in every
            # tenant database (each a copy of the template) and the registry
            role = sql.Identifier(made.role)
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN CONNECTION LIMIT {}").format(
                    role, sql.Literal(ROLE_LIMIT)
                )
            )
            for name in ("template", "registry"):
                with psycopg.connect(made.url(name), autocommit=True) as database:
                    for grant in (
                        "GRANT ALL ON ALL TABLES IN SCHEMA public TO {}",
                        "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}",
                        "GRANT CREATE ON SCHEMA public TO {}",
                        # and the tables a worker of the other test creates later (the
                        # control database's ket_workers, say)
                        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO {}",
                        "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON SEQUENCES TO {}",
                    ):
                        database.execute(sql.SQL(grant).format(role))
            for number in range(TENANTS):
                tenant = f"t{number:02d}"
                admin.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(made.prefix + tenant),
                        sql.Identifier(made.prefix + "template"),
                    )
                )
                names.append(made.prefix + tenant)
                made.tenants.append(tenant)
        registry = TenantRegistry(made.environment()["KET_REGISTRY_URL"])
        try:
            for tenant in made.tenants:
                registry.add(tenant)
        finally:
            registry.close()
        with psycopg.connect(made.url("registry"), autocommit=True) as database:
            database.execute(
                sql.SQL("GRANT ALL ON ALL TABLES IN SCHEMA public TO {}").format(
                    sql.Identifier(made.role)
                )
            )
        yield made
    finally:
        role = sql.Identifier(made.role)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            found = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (made.role,))
            granted = found.fetchone() is not None
        # A retired database is dropped only at the session's end, and the role's privileges in
        # it would keep the role from being dropped now: they go first, database by database.
        for name in names if granted else []:
            url = made.url(name.removeprefix(made.prefix))
            with psycopg.connect(url, autocommit=True) as database:
                database.execute(sql.SQL("DROP OWNED BY {}").format(role))
        drop_databases(postgres_url, names)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(role))


class Sampler:
    """Counts the worker's connections every 50 ms in a thread of its own."""

    def __init__(self, server: Server) -> None:
        self._server = server
        self.counts: list[int] = []
        self.listens: list[int] = []
        self.names: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            seen = self._server.worker_connections()
            self.counts.append(len(seen))
            self.listens.append(sum(1 for _, query, _ in seen if query.startswith("LISTEN")))
            self.names.update(name for _, _, name in seen)
            time.sleep(0.05)


def test_one_worker_serves_thirty_tenants_within_its_budget_woken_through_one_channel(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the application's side (open_async_client) finds the registry as the worker does; its
    # connections (and the hints it sends) name themselves, so they are not counted
    registry = server.environment()["KET_REGISTRY_URL"]
    monkeypatch.setenv("KET_REGISTRY_URL", f"{registry}?application_name={TEST_APP}")
    template = f"{server.template}?application_name={TEST_APP}"
    log = server.root / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker", "--max-connections", str(BUDGET)],
            cwd=server.root,
            env=server.environment(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        with Sampler(server) as sampler:
            until(
                lambda: log.read_text().count("serving tenant t") == TENANTS,
                60,
                "the worker to serve every tenant",
            )
            # it listens once, on the control database, for every tenant
            until(lambda: sampler.listens[-1:] == [1], 30, "one LISTEN")

            async def enqueue_everywhere() -> None:
                for tenant in server.tenants:
                    client = await open_async_client(
                        DEPLOYMENT, tenant=tenant, database_url=template
                    )
                    try:
                        await client.aenqueue("app.ping", {"n": 1})
                    finally:
                        await client.aclose()

            asyncio.run(enqueue_everywhere())
            # each poll waits 30 s: within 20 s only the control channel's hints can have
            # woken every tenant's queue
            until(
                lambda: all(n == 1 for n in server.finished().values()),
                20,
                "every tenant's job to finish",
            )
            # idle now: what it costs the server
            before = server.transactions()
            time.sleep(IDLE_SECONDS)
            idle_rate = (server.transactions() - before) / IDLE_SECONDS / TENANTS
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text
    assert max(sampler.counts) <= BUDGET, (max(sampler.counts), text[-3000:])
    assert set(sampler.listens[-20:]) == {1}
    # an operator sees whose connections they are: the worker's id, as `ket workers list` shows
    # (a connection still authenticating shows no name yet: PostgreSQL sets it after that)
    [name] = sampler.names - {""}
    assert name.startswith("ket worker ") and name.removeprefix("ket worker ") in text
    assert server.finished() == dict.fromkeys(server.tenants, 1)
    # paced: each idle queue claims once in about 30 s (not every poll_max), a rescue comes
    # once a lease; the per-tenant polling this replaces cost about 0.7 per tenant per second
    assert idle_rate < 0.25, idle_rate
    assert "too many clients" not in text and "Traceback" not in text, text[-3000:]


def test_a_worker_the_server_refuses_connections_waits_and_runs_every_job_once(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator gave the worker a budget of 6 but its role a CONNECTION LIMIT of 3: the
    server refuses every fourth connection. Work waits and retries; nothing is lost or run
    twice; the refusals are logged, not repeated many times a second."""
    registry = server.environment()["KET_REGISTRY_URL"]
    monkeypatch.setenv("KET_REGISTRY_URL", f"{registry}?application_name={TEST_APP}")
    template = f"{server.template}?application_name={TEST_APP}"
    (server.root / "fast.py").write_text(textwrap.dedent(FAST_APP))
    for tenant in server.tenants:  # a clean slate after the test before
        with psycopg.connect(server.url(tenant), autocommit=True) as connection:
            connection.execute("DELETE FROM ket_jobs")
    log = server.root / "refused.log"
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ket.cli.main",
                "worker",
                "--workspace",
                "fast.py",
                "--max-connections",
                str(BUDGET),
            ],
            cwd=server.root,
            env=server.environment(as_role=True),
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        begun = time.monotonic()

        async def enqueue_everywhere() -> None:
            for tenant in server.tenants:
                client = await open_async_client(DEPLOYMENT, tenant=tenant, database_url=template)
                try:
                    await client.aenqueue_many([("app.ping", {"n": n}) for n in range(3)])
                finally:
                    await client.aclose()

        asyncio.run(enqueue_everywhere())
        until(
            lambda: all(
                [state for state, _ in jobs] == ["completed"] * 3
                for jobs in server.states().values()
            ),
            90,
            "every job to complete",
        )
        seconds = time.monotonic() - begun
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    text = log.read_text()
    assert code == 0, text[-3000:]
    # the server did refuse, and the worker said so once a minute at most, with the numbers
    said = text.count("refused a connection for want of room")
    assert 1 <= said <= 1 + seconds / 60, text[-3000:]
    assert f'too many connections for role "{server.role}"' in text
    # and no loop or service failed for it more than a few times a minute
    failed = [line for line in text.splitlines() if "too many connections" in line]
    assert len(failed) <= said + 2 * (1 + seconds / 60), failed
    # every job ran to completion once: none was discarded or is still waiting
    states = server.states()
    assert all(len(jobs) == 3 for jobs in states.values())
