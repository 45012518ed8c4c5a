"""`ket uninstall`: ket's tables go only when the operator confirms, naming the database; the
app's model tables stay; `ket migrate` installs them again."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from ket.control.roster import SqlRoster
from ket.store.roster import WorkerInfo
from tests.acceptance.conftest import run_ket

KET_TABLES = {
    "ket_audit",
    "ket_job_errors",
    "ket_job_results",
    "ket_job_steps",
    "ket_jobs",
    "ket_migrations",
    "ket_queue_pauses",
    "ket_job_minutes",
    "ket_minute_cursor",
    "ket_rate_starts",
    "ket_schedule_fires",
    "ket_schedules",
    "ket_sent_messages",
    "ket_sessions",
}


def _tables(url: str) -> set[str]:
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            cursor = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {row[0] for row in cursor if not row[0].startswith("sqlite_")}
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {row[0] for row in rows}


def test_uninstall_asks_drops_ket_tables_only_and_migrate_brings_them_back(
    tenant_database: str, tmp_path: Path
) -> None:
    url = ["--database-url", tenant_database]
    # a registry of the test's own: a `ket_registry` left on the server by anything else
    # (the default registry of a PostgreSQL URL) must not name this database's tenant
    alone = {"KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}"}
    _create_model_table(tenant_database)
    assert _tables(tenant_database) >= KET_TABLES
    refused = run_ket("uninstall", *url, cwd=tmp_path, env=alone)  # no terminal to ask on
    assert refused.code == 2
    assert "there is no terminal to ask on: pass --yes to confirm" in refused.err
    assert "Traceback" not in refused.err
    assert _tables(tenant_database) >= KET_TABLES  # nothing dropped
    done = run_ket("uninstall", *url, "--yes", cwd=tmp_path, env=alone)
    assert done.code == 0, done.err
    assert done.out.startswith("tenant default (")
    assert _tables(tenant_database) == {"m_shop_order"}  # the app's data stays
    again = run_ket("uninstall", *url, "--yes", "--format", "json", cwd=tmp_path, env=alone)
    assert (json.loads(again.out)["tenant"], json.loads(again.out)["removed"]) == ("default", [])
    migrated = run_ket(
        "migrate", *url, "--workspace", str(_workspace(tmp_path)), cwd=tmp_path, env=alone
    )
    assert migrated.code == 0, migrated.err
    assert _tables(tenant_database) >= KET_TABLES


def _connect(url: str) -> Any:
    if url.startswith("sqlite"):
        return sqlite3.connect(url.removeprefix("sqlite:///"))
    return psycopg.connect(url)


def _create_model_table(url: str) -> None:
    with closing(_connect(url)) as connection:
        connection.execute("CREATE TABLE m_shop_order (id TEXT PRIMARY KEY)")
        connection.commit()


def _workspace(folder: Path) -> Path:
    path = folder / "workspace.py"
    path.write_text(
        "from ket import define_deployment\nmain = define_deployment(name='main', modules=[])\n",
        encoding="utf-8",
    )
    return path


CONTROL_TABLES = {"ket_control_migrations", "ket_workers"}


def _ket_tables(url: str) -> set[str]:
    """The tables named ket_... in the database, as sqlite_master or pg_tables lists them."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            found = connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name LIKE 'ket\\_%' ESCAPE '\\'"
            )
            return {row[0] for row in found}
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE 'ket\\_%'"
        ).fetchall()
    return {row[0] for row in rows}


def _report_worker(control_url: str) -> None:
    """A worker records itself in the control database, as `ket worker` does."""

    async def report() -> None:
        roster = SqlRoster(control_url)
        try:
            now = datetime.now(UTC)
            info = WorkerInfo(
                id="host:1:abc",
                host="host",
                pid=1,
                started_at=now,
                tenants=None,
                version="0",
                manifest_hash="0" * 64,
                interval_seconds=10.0,
            )
            await roster.worker_report(info)
        finally:
            await roster.close()

    asyncio.run(report())


def test_uninstall_of_a_single_tenant_database_leaves_no_ket_table(
    tenant_database: str, tmp_path: Path
) -> None:
    # no registry: the single tenant's database is the control database the workers use
    alone = {"KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}"}
    _create_model_table(tenant_database)
    _report_worker(tenant_database)
    assert _ket_tables(tenant_database) == KET_TABLES | CONTROL_TABLES
    url = ["--database-url", tenant_database]
    done = run_ket("uninstall", *url, "--yes", "--format", "json", cwd=tmp_path, env=alone)
    assert done.code == 0, done.err
    assert set(json.loads(done.out)["removed"]) == KET_TABLES | CONTROL_TABLES
    assert _ket_tables(tenant_database) == set()
    assert _tables(tenant_database) == {"m_shop_order"}  # the app's data stays
    assert not (tmp_path / "registry.db").exists()


def test_uninstall_of_one_tenant_keeps_the_registrys_control_tables(
    tenant_database: str, tmp_path: Path
) -> None:
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    env = {"KET_REGISTRY_URL": registry}
    added = run_ket(
        "tenants", "add", "acme", "--tenant-database-url", tenant_database, cwd=tmp_path, env=env
    )
    assert added.code == 0, added.err
    _report_worker(registry)  # with a registry, the workers of every tenant meet there
    _report_worker(tenant_database)  # left from the days the app ran as one tenant
    before = _ket_tables(registry)
    assert before >= CONTROL_TABLES
    done = run_ket("uninstall", "--tenant", "acme", "--yes", cwd=tmp_path, env=env)
    assert done.code == 0, done.err
    assert _ket_tables(tenant_database) == set()
    assert _ket_tables(registry) == before  # the fleet's roster and the registry stay
    listed = run_ket("tenants", "list", cwd=tmp_path, env=env)
    assert "acme" in listed.out, listed


def test_uninstall_of_a_database_that_does_not_exist_creates_none(tmp_path: Path) -> None:
    alone = {"KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}"}
    url = f"sqlite:///{tmp_path / 'never.db'}"
    done = run_ket("uninstall", "--database-url", url, "--yes", cwd=tmp_path, env=alone)
    assert (done.code, done.err) == (0, ""), done
    assert done.out.endswith(": no ket tables to remove\n"), done.out
    assert sorted(path.name for path in tmp_path.iterdir()) == []
