"""The bench's databases on one PostgreSQL server, made once and reused between runs.

Each app has its own set (`Server.prefix`): `ketbench_` for the bench app, `ketbench_ex_` for
the example app (whose databases also hold its models' tables and rows):
- `<prefix>template`: migrated with ket's own migration code (`ket migrate`'s `migrate_all`,
  which also creates the app's model tables); the example app's rows are added to it (`seed`);
- `<prefix>t0001` ...: `CREATE DATABASE ... TEMPLATE <prefix>template` (a file copy on the
  server, far faster than migrating each one); one that exists already is brought to the
  template's schema version by ket's migrations if it lags, and its ket tables are truncated
  (the example app's schedule state is then put a day back: `BenchSetup.after_reset`);
- `<prefix>registry`: the tenant registry (`KET_REGISTRY_URL`), written through ket's
  `TenantRegistry`, holding exactly the tenants of this run; also the control database
  (`ket_workers`), whose rows are cleared before every pass.

Everything is named `ketbench_*`, and `drop_all` drops exactly those databases.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from interrupt import signals_held
from psycopg import sql

from ket.catalog import Catalog
from ket.declare.deployment import DeploymentDecl

PREFIX = "ketbench_"
# every ket table of a tenant database that a run writes (store/sql/migration.py)
RESET_THREADS = 4
TENANT_TABLES = (
    "ket_jobs",
    "ket_job_errors",
    "ket_schedules",
    "ket_schedule_fires",
    "ket_sent_messages",
    "ket_audit",
)


@dataclass(frozen=True, kw_only=True)
class Server:
    """The server's URLs, all derived from the admin URL (its `postgres` database)."""

    admin: str
    prefix: str = PREFIX  # the app's set of databases: `<prefix>t0001`, `<prefix>registry`

    def url(self, database: str) -> str:
        return urlunsplit(urlsplit(self.admin)._replace(path=f"/{database}"))

    def tenant_url(self, tenant: str) -> str:
        return self.url(self.prefix + tenant)

    @property
    def template(self) -> str:
        """KET_DATABASE_URL: the tenant database URL template."""
        return self.url(self.prefix + "{tenant}")

    @property
    def template_db(self) -> str:
        return self.prefix + "template"

    @property
    def registry_db(self) -> str:
        return self.prefix + "registry"

    @property
    def registry(self) -> str:
        """KET_REGISTRY_URL."""
        return self.url(self.registry_db)


@dataclass(frozen=True, kw_only=True)
class BenchSetup:
    """What an app adds to the databases: its deployment (migrated, models included), rows for
    the template, and statements run in each tenant after its ket tables are emptied."""

    deployment: Callable[[], DeploymentDecl]
    seed: Callable[[str], Awaitable[None]] | None = None
    after_reset: Sequence[tuple[str, tuple[Any, ...]]] = field(default_factory=tuple)


def tenant_names(count: int) -> list[str]:
    return [f"t{i:04d}" for i in range(1, count + 1)]


@dataclass(frozen=True, kw_only=True)
class Prepared:
    created: int  # tenant databases created in this set-up
    reused: int
    migrated: int  # existing ones that lagged the template's schema
    seconds: float


def prepare(server: Server, count: int, app: BenchSetup) -> Prepared:
    """Make (or reuse and empty) `count` tenant databases and a registry holding exactly them."""
    began = time.perf_counter()
    names = tenant_names(count)
    template = server.url(server.template_db)
    with psycopg.connect(server.admin, autocommit=True) as admin:
        existing = {
            str(row[0])
            for row in admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'ketbench\\_%'"
            )
        }
        if server.template_db not in existing:
            _create(admin, server.template_db)
        asyncio.run(_migrate(app, {"template": template}))
        if app.seed is not None:
            asyncio.run(app.seed(template))
        _after_reset(template, app)
        latest = _schema_version(template)
        missing = [n for n in names if server.prefix + n not in existing]
        for name in missing:
            _create(admin, server.prefix + name, template=server.template_db)
        if server.registry_db not in existing:
            _create(admin, server.registry_db)
    reused = [n for n in names if server.prefix + n in existing]
    versions = reset_tenants(server, reused, app)
    lagging = {n: server.tenant_url(n) for n in reused if versions[n] < latest}
    if lagging:
        asyncio.run(_migrate(app, lagging))
    _register(server, names)
    return Prepared(
        created=len(missing),
        reused=count - len(missing),
        migrated=len(lagging),
        seconds=time.perf_counter() - began,
    )


def reset_tenants(server: Server, names: list[str], app: BenchSetup) -> dict[str, int]:
    """Empty ket's tables in each tenant database (TRUNCATE those that hold rows; a few
    databases at a time), then the app's `after_reset`, and the roster in the control database;
    each one's schema version."""
    with ThreadPoolExecutor(RESET_THREADS) as pool:
        versions = dict(zip(names, pool.map(lambda n: _reset(server, n, app), names), strict=True))
    with psycopg.connect(server.registry, autocommit=True) as connection:
        if connection.execute("SELECT to_regclass('ket_workers')").fetchone() != (None,):
            connection.execute("TRUNCATE ket_workers")
    return versions


def _reset(server: Server, name: str, app: BenchSetup) -> int:
    with psycopg.connect(server.tenant_url(name), autocommit=True) as connection:
        row = connection.execute(
            "SELECT array_agg(t) FROM unnest(%s::text[]) AS t WHERE to_regclass(t) IS NOT NULL",
            (["ket_migrations", *TENANT_TABLES],),
        ).fetchone()
        present = set(row[0] or []) if row else set()
        if "ket_migrations" not in present:
            return 0
        version = connection.execute("SELECT coalesce(max(version), 0) FROM ket_migrations")
        found = version.fetchone()
        tables = [t for t in TENANT_TABLES if t in present]
        probe = sql.SQL(" UNION ALL ").join(
            sql.SQL("SELECT {} WHERE EXISTS (SELECT FROM {})").format(
                sql.Literal(t), sql.Identifier(t)
            )
            for t in tables
        )
        full = [str(r[0]) for r in connection.execute(probe).fetchall()]
        if full:
            listed = sql.SQL(", ").join(sql.Identifier(t) for t in full)
            connection.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY").format(listed))
        for statement, params in app.after_reset:
            connection.execute(statement, params)
    return int(found[0]) if found else 0


def _after_reset(url: str, app: BenchSetup) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        for statement, params in app.after_reset:
            connection.execute(statement, params)


def drop_all(server: Server) -> list[str]:
    """DROP every `ketbench_*` database; their names."""
    with psycopg.connect(server.admin, autocommit=True) as admin:
        names = [
            str(row[0])
            for row in admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'ketbench\\_%' ORDER BY 1"
            )
        ]
        for name in names:
            with signals_held():
                admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
    return names


def _create(admin: psycopg.Connection, name: str, *, template: str | None = None) -> None:
    with signals_held():
        if template is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        else:
            admin.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )


async def _migrate(app: BenchSetup, urls: dict[str, str]) -> None:
    """ket's own migration code, as `ket migrate` runs it: one process, one database at a time."""
    from ket.cli.migrate import migrate_all

    await migrate_all(Catalog.build(app.deployment()), urls)


def _schema_version(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        if connection.execute("SELECT to_regclass('ket_migrations')").fetchone() == (None,):
            return 0
        row = connection.execute("SELECT coalesce(max(version), 0) FROM ket_migrations").fetchone()
    return int(row[0]) if row else 0


def _register(server: Server, names: list[str]) -> None:
    """The registry holds exactly `names` (through ket's TenantRegistry; extras are removed,
    their databases kept for a later, larger run)."""
    from ket.control.registry import TenantRegistry

    registry = TenantRegistry(server.registry)
    try:
        registered = registry.databases()
        wanted = set(names)
        for name in registered:
            if name not in wanted:
                registry.remove(name)
        for name in names:
            if name not in registered:
                registry.add(name, template=server.template)
    finally:
        registry.close()
