"""Migrations: a database migrated from nothing equals one created from schema.py; re-running
changes nothing; every version is recorded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from ket.store.sql import LATEST, MIGRATIONS, migrate, schema_version
from ket.store.sql.migration import uninstall
from ket.store.sql.schema import metadata

KET_TABLES = [
    "ket_audit",
    "ket_job_errors",
    "ket_jobs",
    "ket_schedule_fires",
    "ket_schedules",
    "ket_sent_messages",
]


def _shape(engine: Engine) -> dict[str, Any]:
    """Tables, columns, indexes (with their predicates) and checks, comparable across builds."""
    inspector = inspect(engine)
    shape: dict[str, Any] = {}
    for table in KET_TABLES:
        columns = [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)]
        indexes = sorted(
            (
                i["name"],
                tuple(i["column_names"]),
                bool(i["unique"]),
                " ".join(str(v) for v in i.get("dialect_options", {}).values()).lower(),
            )
            for i in inspector.get_indexes(table)
        )
        checks = sorted(
            " ".join(c["sqltext"].lower().split()) for c in inspector.get_check_constraints(table)
        )
        primary = inspector.get_pk_constraint(table)["constrained_columns"]
        shape[table] = {"columns": columns, "indexes": indexes, "checks": checks, "pk": primary}
    return shape


@pytest.fixture(params=["sqlite", "postgresql"])
def two_databases(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Engine, Engine]]:
    """Two empty databases of one dialect: one for create_all, one for the migrations."""
    if request.param == "sqlite":
        engines = [
            create_engine(f"sqlite:///{tmp_path / name}.db") for name in ("fresh", "migrated")
        ]
        yield engines[0], engines[1]
    else:
        url = request.getfixturevalue("postgres_url")
        url = url.replace("postgresql://", "postgresql+psycopg://")
        first = request.getfixturevalue("postgres_schema")
        second = f"{first}_m"
        admin = create_engine(url)
        with admin.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{second}"'))
        engines = [
            create_engine(url, connect_args={"options": f"-c search_path={schema}"})
            for schema in (first, second)
        ]
        yield engines[0], engines[1]
        for engine in engines:
            engine.dispose()
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{second}" CASCADE'))
        admin.dispose()
        return
    for engine in engines:
        engine.dispose()


def test_migrating_from_nothing_equals_the_schema_the_queries_use(
    two_databases: tuple[Engine, Engine],
) -> None:
    fresh, migrated = two_databases
    metadata.create_all(fresh, tables=[metadata.tables[name] for name in KET_TABLES])
    with migrated.begin() as connection:
        applied = migrate(connection)
    assert applied == [m.version for m in MIGRATIONS]
    assert _shape(migrated) == _shape(fresh)


def test_migrating_twice_applies_nothing_the_second_time(
    two_databases: tuple[Engine, Engine],
) -> None:
    _, engine = two_databases
    with engine.begin() as connection:
        assert schema_version(connection) == 0
        migrate(connection)
    with engine.begin() as connection:
        assert migrate(connection) == []
        assert schema_version(connection) == LATEST
        recorded = connection.execute(text("SELECT version FROM ket_migrations")).scalars().all()
    assert sorted(recorded) == [m.version for m in MIGRATIONS]


def test_migration_versions_are_consecutive_and_named() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    for migration in MIGRATIONS:
        assert migration.name
        assert set(migration.statements) == {"postgresql", "sqlite"}


def test_the_audit_log_keeps_its_entries_when_it_learns_enqueues_and_reruns(
    two_databases: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, engine = two_databases
    entry = (
        "INSERT INTO ket_audit (at, subject, source, action, job_id, selection, matched, "
        "changed, skipped, detail) VALUES ({at}, 'ada@host', 'cli', '{action}', 7, '{{}}', 1, 1, "
        "0, 'discarded -> available')"
    )
    at = "now()" if engine.dialect.name == "postgresql" else "0"
    with monkeypatch.context() as before_reruns, engine.begin() as connection:
        before_reruns.setattr("ket.store.sql.migration.MIGRATIONS", MIGRATIONS[:5])
        assert migrate(connection) == [1, 2, 3, 4, 5]
        connection.execute(text(entry.format(at=at, action="retry")))
    with engine.begin() as connection:
        assert migrate(connection) == [m.version for m in MIGRATIONS[5:]]  # 6 and later
        connection.execute(text(entry.format(at=at, action="rerun")))
        kept = connection.execute(text("SELECT id, action, detail FROM ket_audit ORDER BY id"))
        assert [tuple(row) for row in kept] == [
            (1, "retry", "discarded -> available"),
            (2, "rerun", "discarded -> available"),
        ]
        with pytest.raises(Exception, match="ket_audit_action"), connection.begin_nested():
            connection.execute(text(entry.format(at=at, action="delete")))


def test_uninstall_on_postgresql_drops_ket_s_functions_and_migrate_brings_them_back(
    postgres_url: str, postgres_schema: str
) -> None:
    url = postgres_url.replace("postgresql://", "postgresql+psycopg://")
    engine = create_engine(url, connect_args={"options": f"-c search_path={postgres_schema}"})
    functions = text(
        "SELECT proname FROM pg_proc WHERE pronamespace = current_schema()::regnamespace "
        "ORDER BY proname"
    )
    try:
        with engine.begin() as connection:
            migrate(connection)
        with engine.connect() as connection:
            assert connection.execute(functions).scalars().all() == [
                "ket_claim",
                "ket_jobs_notify",
                "ket_limited_claim",
            ]
        with engine.begin() as connection:
            uninstall(connection)
        with engine.connect() as connection:
            assert connection.execute(functions).scalars().all() == []
            assert inspect(connection).get_table_names() == []
        with engine.begin() as connection:
            assert migrate(connection) == [m.version for m in MIGRATIONS]
    finally:
        engine.dispose()
