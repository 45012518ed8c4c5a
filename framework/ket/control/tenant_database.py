"""Creating a tenant's database, or the registry's, where ket can: a SQLite file, or a PostgreSQL
database; and asking, without creating anything, whether `ket migrate` installed ket there."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql

from ket.connection.address import (
    SQLITE_BUSY_TIMEOUT_S,
    connect_args,
    parse_url,
    psycopg_params,
)
from ket.connection.database_file import sqlite_path
from ket.connection.database_url import shown_url
from ket.connection.url import DatabaseUrl
from ket.control.registry_reader import missing_database
from ket.errors import StoreError
from ket.store.failure import describe
from ket.store.sql.failure import hide_password

# the table `ket migrate` creates first and every later version keeps
_MARK = "ket_migrations"


async def create_database(url: str) -> bool:
    """Create the database `url` names if it does not exist; True if it was created.

    SQLite files are created on first use; PostgreSQL databases are created through the
    server's `postgres` database (the role needs CREATEDB).
    """

    async def create(connection: psycopg.AsyncConnection[Any], name: str, exists: bool) -> bool:
        if exists:
            return False
        await connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return True

    return await _on_server(url, "create", create)


async def schema_installed(url: str) -> bool:
    """Whether ket's tables are in the database `url` names (`ket migrate` ran there); False
    when the database, or its SQLite file, does not exist, which asking never creates.
    StoreError, without the password, when it cannot be reached."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_schema_installed(url)
    params = psycopg_params(parsed)
    options = {k: v for k, v in connect_args().items() if k not in params}
    try:
        async with await psycopg.AsyncConnection.connect(
            autocommit=True, **params, **options
        ) as connection:
            found = await connection.execute("SELECT to_regclass(%s) IS NOT NULL", (_MARK,))
            row = await found.fetchone()
    except (psycopg.Error, OSError) as error:  # OSError: asyncio's timeouts, lost sockets
        if missing_database(error, params.get("dbname")):
            return False
        reason = hide_password(describe(error), parsed)
        raise StoreError(f"cannot read database {shown_url(parsed)!r}: {reason}") from error
    return row is not None and bool(row[0])


def _sqlite_schema_installed(url: str) -> bool:
    path = sqlite_path(url)
    if path is None or not path.is_file():
        return False  # a memory database holds nothing yet; a missing file is not created
    try:
        connection = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
            return connection.execute(query, (_MARK,)).fetchone() is not None
        finally:
            connection.close()
    except sqlite3.Error as error:
        raise StoreError(f"cannot read database {shown_url(url)!r}: {describe(error)}") from error


async def drop_database(url: str) -> bool:
    """Drop the PostgreSQL database `url` names, closing its sessions (a test's scratch
    database); True if it existed. A SQLite file is left to its folder's owner."""

    async def drop(connection: psycopg.AsyncConnection[Any], name: str, exists: bool) -> bool:
        if not exists:
            return False
        await connection.execute(
            sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
        )
        return True

    return await _on_server(url, "drop", drop)


Change = Callable[["psycopg.AsyncConnection[Any]", str, bool], Awaitable[bool]]


async def _on_server(url: str, verb: str, change: Change) -> bool:
    """Run `change(connection, name, exists)` for the PostgreSQL database `url` names, on a
    connection to its server's `postgres` database; False for SQLite (files come and go with
    their use). StoreError, without the password, when the server refuses."""
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite":
        return False
    name = parsed.database
    if not name:
        raise StoreError(f"database URL {shown_url(parsed)!r} names no database")
    admin = parsed.set(drivername="postgresql", database="postgres")
    dsn = admin.render_as_string(hide_password=False)
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            found = await connection.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            )
            return await change(connection, name, await found.fetchone() is not None)
    except (psycopg.Error, OSError) as error:  # OSError: asyncio's timeouts, lost sockets
        reason = hide_password(describe(error), admin)
        raise StoreError(f"cannot {verb} database {name!r}: {reason}") from error


async def create_registry_database(url: str) -> bool:
    """Create the tenant registry's PostgreSQL database when ket chose it (`ket_registry` on
    the tenants' server) and it is missing; True if it was created.

    A role that may not create it gets an error naming the database and the two ways on: have
    it created, or point KET_REGISTRY_URL at a database of the registry's own.
    """
    parsed = parse_url(url)
    if parsed.get_backend_name() == "sqlite" or await _reachable(parsed):
        return False
    try:
        return await create_database(url)
    except StoreError as error:
        name = parsed.database
        server = shown_url(parsed.set(database=""))
        raise StoreError(
            f"the tenant registry's database {name!r} does not exist on {server} and ket "
            f"cannot create it ({error.message}); create it with a role that may "
            f"(CREATE DATABASE {name}), or set KET_REGISTRY_URL to the database the registry "
            "should use"
        ) from error


async def _reachable(parsed: DatabaseUrl) -> bool:
    """Whether the database exists: a connection refused for any other reason counts as
    existing, and the registry then says what is wrong in its own words."""
    params = psycopg_params(parsed)
    options = {k: v for k, v in connect_args().items() if k not in params}
    try:
        connection = await psycopg.AsyncConnection.connect(autocommit=True, **params, **options)
    except psycopg.OperationalError as error:
        return not missing_database(error, parsed.database)
    await connection.close()
    return True
