"""Which database an application's connection is on, so that `enqueue(connection=...)` writes
into the client's tenant and no other.

A connection on another database would put the job into that database's ket_jobs, where that
tenant's workers run it, with no error. So the client asks the application's connection what
its server calls it, inside the caller's transaction and before the insert, and compares the
answer with the tenant's database (`TenantDatabase`):

- PostgreSQL: `current_database()` and the server's `port` setting, asked of both the
  application's connection and the tenant's (through the client's own connection), so that
  both answers come from the servers: a URL's host and port (a DNS name, a pooler, a socket, a
  container's mapped port) need not be the application's. The host is never compared, as no
  server can say which of its names a client used: two servers on the same port of two
  machines, each with a database of the same name, look alike.
- SQLite: the main database's file, as SQLite names it, against the file of the client's URL
  (both with links resolved). It is read from the URL rather than from a connection of the
  client's own: that connection would wait for the write lock the caller's transaction holds.

A connection found on the tenant's database is remembered while it lives (the driver's
connection, which Django replaces when it reconnects), so the question costs one round trip
per connection; sqlite3's connections cannot be remembered, and are asked each time (a call
into a local file, no round trip).
"""

from __future__ import annotations

import contextlib
import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg

from ket.errors import ConnectionRejected

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection

# what each backend answers: the database's name and its server's port (none for SQLite)
QUESTION = {
    "postgresql": "SELECT current_database(), current_setting('port')",
    "sqlite": "SELECT file, NULL FROM pragma_database_list WHERE name = 'main'",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Database:
    """A database as its server names it: PostgreSQL's name and port, or SQLite's file."""

    backend: str
    name: str
    port: str | None = None

    def __str__(self) -> str:
        if self.backend == "postgresql":
            return f"database {self.name!r} (port {self.port})"
        if self.backend == "sqlite":
            return f"SQLite database {self.name or ':memory:'!r}"
        return f"{self.backend} database {self.name!r}"


def answer(backend: str, row: Any) -> Database:
    """The Database of `backend` whose QUESTION returned `row`."""
    name, port = row[0], row[1]
    if backend == "sqlite":
        return sqlite_file(name)
    return Database(backend=backend, name=str(name), port=None if port is None else str(port))


def sqlite_file(path: str | None) -> Database:
    """The SQLite database at `path` (a URL's or SQLite's own; empty or :memory: for none)."""
    file = os.path.realpath(path) if path and path != ":memory:" else ""
    return Database(backend="sqlite", name=file)


def engine_database(connection: Connection) -> Database:
    """The database of a SQLAlchemy connection, asked in its transaction."""
    backend = connection.dialect.name
    if backend not in QUESTION:  # no insert plan runs there: refused as another database
        return Database(backend=backend, name=connection.engine.url.database or "")
    return answer(backend, connection.exec_driver_sql(QUESTION[backend]).one())


async def async_engine_database(connection: AsyncConnection) -> Database:
    """The database of a SQLAlchemy asyncio connection, asked in its transaction."""
    backend = connection.dialect.name
    if backend not in QUESTION:
        return Database(backend=backend, name=connection.engine.url.database or "")
    return answer(backend, (await connection.exec_driver_sql(QUESTION[backend])).one())


def psycopg_database(connection: psycopg.Connection[Any]) -> Database:
    """The database of a psycopg connection, asked in its transaction."""
    # a cursor of psycopg's own class, as the insert's (Django's connections make other ones)
    with psycopg.Cursor(connection) as cursor:
        return answer("postgresql", cursor.execute(QUESTION["postgresql"]).fetchone())


async def async_psycopg_database(connection: psycopg.AsyncConnection[Any]) -> Database:
    """The database of a psycopg asyncio connection, asked in its transaction."""
    async with psycopg.AsyncCursor(connection) as cursor:
        await cursor.execute(QUESTION["postgresql"])
        return answer("postgresql", await cursor.fetchone())


class TenantDatabase:
    """A client's tenant, its database once known (`database`), and the application's
    connections found on it, remembered while they live."""

    def __init__(self, tenant: str, database: Database | None = None) -> None:
        self.tenant = tenant
        self.database = database
        self._admitted: weakref.WeakSet[object] = weakref.WeakSet()

    def knows(self, driver_connection: object) -> bool:
        """Whether this driver connection was found on the tenant's database before."""
        return driver_connection in self._admitted  # False for one that takes no weakref

    def admit(self, driver_connection: object, found: Database) -> None:
        """Remember the connection on which `found` was asked if it is the tenant's database;
        else ConnectionRejected naming both."""
        if found != self.database:
            raise ConnectionRejected(
                f"connection= is on {found} but this client writes tenant {self.tenant!r}, on "
                f"{self.database}: its job would go into the other database's ket_jobs, for "
                "its workers; nothing was written"
            )
        with contextlib.suppress(TypeError):  # sqlite3's take no weakref: asked each time
            self._admitted.add(driver_connection)


__all__ = [
    "Database",
    "TenantDatabase",
    "async_engine_database",
    "async_psycopg_database",
    "engine_database",
    "psycopg_database",
    "sqlite_file",
]
