"""Creating a tenant's database where ket can: a SQLite file, or a PostgreSQL database."""

from __future__ import annotations

import psycopg
from psycopg import sql

from ket.errors import StoreError
from ket.store.database_url import shown_url
from ket.store.failure import describe
from ket.store.sql.address import parse_url
from ket.store.sql.failure import hide_password


async def create_database(url: str) -> bool:
    """Create the database `url` names if it does not exist; True if it was created.

    SQLite files are created on first use; PostgreSQL databases are created through the
    server's `postgres` database (the role needs CREATEDB).
    """
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
            if await found.fetchone():
                return False
            await connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return True
    except (psycopg.Error, OSError) as error:  # OSError: asyncio's timeouts, lost sockets
        reason = hide_password(describe(error), admin)
        raise StoreError(f"cannot create database {name!r}: {reason}") from error


async def drop_database(url: str) -> bool:
    """Drop the PostgreSQL database `url` names, closing its sessions (a test's scratch
    database); True if it existed. A SQLite file is left to its folder's owner."""
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
            if not await found.fetchone():
                return False
            await connection.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )
            return True
    except (psycopg.Error, OSError) as error:
        reason = hide_password(describe(error), admin)
        raise StoreError(f"cannot drop database {name!r}: {reason}") from error
