"""The control database's schema and statements: `ket_workers`, versioned on its own.

The tables here are the one schema source the statements use; the migrations that build them
(control_migration.py) must always give the same schema (a test proves it).

The statements are built once per dialect like query.py's; PostgreSQL runs their generated text
(statement.py), so a worker reports itself without importing SQLAlchemy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    Column,
    Float,
    Integer,
    MetaData,
    Table,
    Text,
    bindparam,
    delete,
    func,
    literal,
    literal_column,
    select,
    table,
)
from sqlalchemy.dialects import postgresql, sqlite

from ket.store.sql.column import Instant
from ket.store.sql.now import TimeSql

metadata = MetaData()

workers = Table(
    "ket_workers",
    metadata,
    Column("id", Text, primary_key=True),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("started_at", Instant, nullable=False),
    Column("last_seen_at", Instant, nullable=False),
    Column("tenants", Text, nullable=False),  # JSON: a list of names, or "all"
    Column("queues", Text, nullable=False),  # JSON: queue -> concurrency on this host
    Column("version", Text, nullable=False),
    Column("manifest_hash", Text, nullable=False),
    Column("interval_s", Float, nullable=False),  # how often it reports
)

control_migrations = Table(
    "ket_control_migrations",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    Column("applied_at", Instant, nullable=False),
)


@dataclass(frozen=True)
class ControlStatements:
    """The roster's statements in one dialect (parameters `w_<column>`, and the time ones)."""

    report: Any  # upsert a worker's row, seen now
    forget: Any  # delete rows last seen before `forget_at` (`forget_s` after now, negative)
    listing: Any  # every row, oldest first, and the database's now
    remove: Any  # parameter `w_id`; RETURNING the id removed
    present: Any  # a row when the roster's table exists (a reader creates nothing)
    version: Any  # the newest applied control migration
    applied: Any  # record a migration: `version`, `name`, and now


@cache
def statements(dialect: str) -> ControlStatements:
    """The cached roster statements of `dialect`."""
    time = TimeSql(dialect)
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    rows = workers
    given = {
        name: bindparam(f"w_{name}", type_=rows.c[name].type)
        for name in (
            "id",
            "host",
            "pid",
            "started_at",
            "tenants",
            "queues",
            "version",
            "manifest_hash",
            "interval_s",
        )
    }
    new = upsert(rows).values(**given, last_seen_at=time.now())
    # the whole report again: a row forgotten meanwhile, or a worker id reused, is made whole
    report = new.on_conflict_do_update(
        index_elements=[rows.c.id],
        set_={name: new.excluded[name] for name in (*given, "last_seen_at") if name != "id"},
    )
    ledger = control_migrations
    return ControlStatements(
        report=report,
        forget=delete(rows).where(rows.c.last_seen_at < time.at("forget")),
        listing=select(rows, time.now().label("now")).order_by(rows.c.started_at, rows.c.id),
        remove=delete(rows).where(rows.c.id == given["id"]).returning(rows.c.id),
        present=_present(dialect),
        version=select(ledger.c.version).order_by(ledger.c.version.desc()).limit(1),
        applied=ledger.insert().values(
            version=bindparam("version", type_=Integer),
            name=bindparam("name", type_=Text),
            applied_at=time.now(),
        ),
    )


def _present(dialect: str) -> Any:
    """A row when `ket_workers` exists: on PostgreSQL in the search path, as the other
    statements find it."""
    if dialect == "postgresql":
        found = func.to_regclass(literal("ket_workers", Text))
        return select(found).where(found.is_not(None))
    master = table("sqlite_master", literal_column("name"), literal_column("type"))
    return select(master.c.name).where(
        master.c.type == literal("table", Text), master.c.name == literal("ket_workers", Text)
    )
