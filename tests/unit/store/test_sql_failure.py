"""The SQL store's failures in words: a full pool says so, a missing schema says to migrate,
the driver's first line otherwise, and never a password; the registry keeps to it too."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError, ProgrammingError, SQLAlchemyError, StatementError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ket.control.registry import TenantRegistry
from ket.errors import StoreError, StoreUnavailable
from ket.store.sql import SqlStore
from ket.store.sql.failure import database_error, from_database, locked, unreachable

# building an engine connects to nothing, so the server need not exist
ENGINE = create_engine(
    "postgresql+psycopg://app:hunter2@db.invalid/erp", pool_size=3, max_overflow=2, pool_timeout=7
)


def test_a_pool_with_no_free_connection_says_so_with_its_size_and_timeout() -> None:
    error = database_error(PoolTimeout("QueuePool limit of size 3 overflow 2 reached"), ENGINE)
    assert error.message.startswith("no database connection free within 7 s (pool of 5): ")


def test_a_database_error_gives_the_drivers_first_line() -> None:
    cause = OperationalError("SELECT 1", {}, Exception("server closed the connection\nmore"))
    assert database_error(cause, ENGINE).message == "database error: server closed the connection"


def test_a_missing_table_of_ket_says_to_run_ket_migrate() -> None:
    cause = ProgrammingError("SELECT", {}, Exception('relation "ket_jobs" does not exist'))
    assert database_error(cause, ENGINE).message.endswith("run `ket migrate`")


def test_a_password_the_driver_quoted_is_hidden() -> None:
    cause = OperationalError("connect", {}, Exception("bad dsn app:hunter2@db.invalid"))
    message = database_error(cause, ENGINE).message
    assert "hunter2" not in message and "app:***@db.invalid" in message


@pytest.mark.parametrize(
    ("error", "start", "kind"),
    [
        (
            StatementError("instants must be timezone-aware", "SELECT", {}, None),
            "database error",
            StoreError,
        ),
        # a lost socket or a timeout: the database cannot be reached now
        (TimeoutError(), "database connection failed: TimeoutError", StoreUnavailable),
        (
            ConnectionResetError("reset by peer"),
            "database connection failed: Connection",
            StoreUnavailable,
        ),
        (
            sqlite3.OperationalError("disk I/O error"),
            "database error: OperationalError: disk",
            StoreError,
        ),
        (ValueError("odd"), "the store failed: ValueError: odd", StoreError),
    ],
)
def test_every_other_failure_becomes_a_store_error_too(
    error: Exception, start: str, kind: type[StoreError]
) -> None:
    translated = database_error(error, ENGINE)
    assert type(translated) is kind
    assert translated.message.startswith(start), translated.message


def test_a_database_away_is_told_from_a_statement_it_refused() -> None:
    # what a restart looks like to a client: refused, cut off by the shutdown, or starting
    assert unreachable(psycopg.OperationalError("connection refused"))
    assert unreachable(psycopg.errors.AdminShutdown("terminating connection"))
    assert unreachable(psycopg.errors.CannotConnectNow("the database system is starting up"))
    assert unreachable(psycopg.errors.ConnectionFailure("lost"))
    # a statement the database refused is no outage, though psycopg calls some operational
    assert not unreachable(psycopg.errors.QueryCanceled("statement timeout"))
    assert not unreachable(psycopg.errors.UniqueViolation("duplicate key"))
    assert not unreachable(ValueError("the caller's own"))
    wrapped = OperationalError("SELECT 1", {}, psycopg.errors.AdminShutdown("terminating"))
    assert type(database_error(wrapped, ENGINE)) is StoreUnavailable


def test_only_sqlalchemy_and_driver_errors_count_as_the_databases() -> None:
    assert from_database(OperationalError("s", {}, Exception("x")))
    assert from_database(sqlite3.IntegrityError("x"))
    assert not from_database(ValueError("the caller's own"))
    assert not from_database(OSError("the caller's own file"))


def test_only_a_locked_sqlite_database_is_worth_retrying() -> None:
    assert locked(OperationalError("s", {}, sqlite3.OperationalError("database is locked")))
    assert not locked(OperationalError("s", {}, sqlite3.OperationalError("disk I/O error")))
    assert not locked(ValueError("database is locked"))


def test_a_database_error_in_a_transaction_block_becomes_store_error(tmp_path: Path) -> None:
    async def main() -> None:
        store = await SqlStore.open(f"sqlite:///{tmp_path / 'jobs.db'}", migrate=True)
        try:
            with pytest.raises(StoreError, match="no such table: nowhere") as caught:
                async with store.transaction() as tx:
                    assert tx.connection is not None
                    await tx.connection.execute(text("SELECT * FROM nowhere"))
            assert isinstance(caught.value.__cause__, SQLAlchemyError)
            assert await store.job_insert([]) == []  # and the store goes on
        finally:
            await store.close()

    asyncio.run(main())


def test_a_pool_exhausted_by_a_transaction_fails_other_calls_with_store_error(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        store = await SqlStore.open(
            url, migrate=True, pool_size=1, max_overflow=0, pool_timeout=0.05
        )
        try:
            async with store.transaction():
                with pytest.raises(StoreError, match=r"within 0.05 s \(pool of 1\)") as caught:
                    await store.job_rescue()
            assert isinstance(caught.value.__cause__, PoolTimeout)
            assert await store.job_rescue() == []
        finally:
            await store.close()

    asyncio.run(main())


def test_the_registry_raises_store_error_when_its_table_is_gone_and_hides_passwords(
    tmp_path: Path,
) -> None:
    path = tmp_path / "registry.db"
    registry = TenantRegistry(f"sqlite:///{path}")
    try:
        registry.add("acme")
        with sqlite3.connect(path) as raw:
            raw.execute("DROP TABLE ket_tenants")
        with pytest.raises(StoreError, match="no such table: ket_tenants") as caught:
            registry.list()
        assert isinstance(caught.value.__cause__, SQLAlchemyError)
        with pytest.raises(StoreError):
            registry.remove("acme")
    finally:
        registry.close()
    with pytest.raises(StoreError) as refused:
        TenantRegistry("postgresql://app:hunter2@127.0.0.1:1/registry")
    assert "hunter2" not in str(refused.value)


def test_a_driver_error_on_the_lane_says_what_the_engine_would_without_the_password() -> None:
    import psycopg

    from ket.connection.url import make_url
    from ket.store.sql.failure import driver_error

    url = make_url("postgresql://app:s3cret@db/erp")
    missing = psycopg.errors.UndefinedTable('relation "ket_schedules" does not exist')
    assert driver_error(missing, url).message == (
        'database error: UndefinedTable: relation "ket_schedules" does not exist: '
        "this database has no ket tables yet; run `ket migrate`"
    )
    # a table of a later migration: the database is older than this ket, not empty
    newer = psycopg.errors.UndefinedTable('relation "ket_queue_pauses" does not exist')
    assert driver_error(newer, url).message == (
        'database error: UndefinedTable: relation "ket_queue_pauses" does not exist: '
        "this database's ket tables are older than this version of ket; run `ket migrate`"
    )
    lost = OSError("connection to app:s3cret@db lost")
    assert driver_error(lost, url).message == (
        "database connection failed: OSError: connection to app:***@db lost"
    )


def test_a_column_of_a_later_migration_missing_says_the_database_is_older_than_this_ket() -> None:
    import sqlite3

    import psycopg

    from ket.connection.url import make_url
    from ket.store.sql.failure import driver_error

    url = make_url("postgresql://app@db/erp")
    older = "this database's ket tables are older than this version of ket; run `ket migrate`"
    for error in (
        psycopg.errors.UndefinedColumn("column ket_jobs.expires_at does not exist"),
        psycopg.errors.UndefinedColumn('column "rate_key" of relation "ket_jobs" does not exist'),
        sqlite3.OperationalError("no such column: concurrency_key"),
    ):
        assert driver_error(error, url).message.endswith(older), error
    # an app's own column, or a column of an app's table, gets no ket cure
    for error in (
        sqlite3.OperationalError("no such column: customer_id"),
        psycopg.errors.UndefinedColumn('column "expires_at" of relation "orders" does not exist'),
    ):
        assert "ket migrate" not in driver_error(error, url).message, error


def test_the_later_columns_are_the_ones_later_migrations_add() -> None:
    import re

    from ket.store.sql.failure import LATER_COLUMNS
    from ket.store.sql.migration import MIGRATIONS

    for dialect in ("postgresql", "sqlite"):
        added = {
            column
            for migration in MIGRATIONS[1:]
            for statement in migration.statements[dialect]
            for column in re.findall(r"ADD COLUMN (\w+)", statement)
        }
        assert added == LATER_COLUMNS, dialect


def test_the_first_migration_s_tables_are_the_ones_whose_absence_means_no_ket_tables() -> None:
    import re

    from ket.store.sql.failure import FIRST_TABLES
    from ket.store.sql.migration import MIGRATIONS

    for dialect in ("postgresql", "sqlite"):
        created = re.findall(r"CREATE TABLE (ket_\w+)", " ".join(MIGRATIONS[0].statements[dialect]))
        assert set(created) == FIRST_TABLES


def test_a_server_without_room_is_no_room_wherever_ket_meets_it() -> None:
    import psycopg

    from ket.connection.url import make_url
    from ket.errors import NoRoom, StoreUnavailable
    from ket.store.sql.failure import driver_error

    url = make_url("postgresql://app:s3cret@db/erp")
    full = psycopg.OperationalError(
        "connection failed: FATAL:  remaining connection slots are reserved for "
        "non-replication superuser connections"
    )
    assert type(driver_error(full, url)) is NoRoom
    lost = psycopg.OperationalError("connection failed: server closed the connection")
    assert type(driver_error(lost, url)) is StoreUnavailable
