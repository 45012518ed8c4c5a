"""`ket uninstall`: ket's tables go only when the operator confirms, naming the database; the
app's model tables stay; `ket migrate` installs them again."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg

from tests.acceptance.conftest import run_ket

KET_TABLES = {
    "ket_audit",
    "ket_job_errors",
    "ket_jobs",
    "ket_migrations",
    "ket_schedule_fires",
    "ket_schedules",
    "ket_sent_messages",
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
