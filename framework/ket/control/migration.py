"""The control database's migrations: versioned, idempotent, recorded in their own ledger.

The control database is the registry's, or a single tenant's own database, so its tables keep a
ledger of their own, `ket_control_migrations`, apart from a tenant's `ket_migrations`: each
schema upgrades at its own pace. Each migration is plain DDL per dialect, frozen once released
(control.py's tables must equal the result of applying them all; a test proves it). A worker
applies them on its first report, with the database driver alone, so this module imports no
SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows


@dataclass(frozen=True, kw_only=True)
class ControlMigration:
    """One step of the control schema: DDL statements per dialect name."""

    version: int
    name: str
    statements: Mapping[str, tuple[str, ...]]


def _v1(instant: str, real: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE ket_workers (
            id TEXT NOT NULL PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at {instant} NOT NULL,
            last_seen_at {instant} NOT NULL,
            tenants TEXT NOT NULL,
            queues TEXT NOT NULL,
            version TEXT NOT NULL,
            manifest_hash TEXT NOT NULL,
            interval_s {real} NOT NULL
        )""",
    )


CONTROL_MIGRATIONS: tuple[ControlMigration, ...] = (
    ControlMigration(
        version=1,
        name="the worker roster",
        statements={
            "postgresql": _v1("TIMESTAMP WITH TIME ZONE", "DOUBLE PRECISION"),
            "sqlite": _v1("BIGINT", "FLOAT"),
        },
    ),
)
CONTROL_LATEST = CONTROL_MIGRATIONS[-1].version
# every table these migrations make, their ledger last (dropped by `ket uninstall`)
CONTROL_TABLES = ("ket_workers", "ket_control_migrations")
_LEDGER = {
    "postgresql": "CREATE TABLE IF NOT EXISTS ket_control_migrations (version INTEGER NOT NULL "
    "PRIMARY KEY, name TEXT NOT NULL, applied_at TIMESTAMP WITH TIME ZONE NOT NULL)",
    "sqlite": "CREATE TABLE IF NOT EXISTS ket_control_migrations (version INTEGER NOT NULL "
    "PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
}
# Serialises concurrent first reports on PostgreSQL (SQLite's write lock does it there); not
# the tenant schema's key, so a `ket migrate` never waits for it.
_PG_LOCK = "SELECT pg_advisory_xact_lock(7037283)"

Ddl = Callable[[str], Awaitable[None]]


async def migrate_control(rows: Rows, ddl: Ddl, now: datetime | None) -> list[int]:
    """Apply the missing control migrations inside the caller's transaction; returns the
    versions applied. `ddl` runs one statement of plain SQL on the same connection; `now` is
    the time parameter of the dialect (None: the database's clock)."""
    if rows.dialect == "postgresql":
        await ddl(_PG_LOCK)
    await ddl(_LEDGER[rows.dialect])
    found = await rows.rows(stmt.CONTROL_VERSION)
    current = found[0][0] if found else 0
    done: list[int] = []
    for migration in CONTROL_MIGRATIONS:
        if migration.version <= current:
            continue
        for statement in migration.statements[rows.dialect]:
            await ddl(statement)
        params = {"version": migration.version, "name": migration.name, "now": now}
        await rows.rows(stmt.CONTROL_APPLIED, params)
        done.append(migration.version)
    return done
