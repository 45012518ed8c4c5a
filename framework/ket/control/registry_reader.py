"""Reading the tenant registry without SQLAlchemy: what a worker does on every tenant refresh.

`TenantRegistry` (registry.py) adds, checks and removes tenants through SQLAlchemy; a worker only
lists them, so it reads the same table with the drivers alone: the standard library's sqlite3
for a SQLite registry, psycopg for a PostgreSQL one (a connection per read: a refresh comes every
`tenant_refresh_ms`, and a connection the server dropped cannot fail the next one). A registry
that does not exist yet (no file, no database, no table) lists no tenants and is not created by
reading it: `ket tenants add` creates it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ket.connection.address import (
    SQLITE_BUSY_TIMEOUT_S,
    connect_args,
    parse_url,
    psycopg_params,
)
from ket.connection.database_file import sqlite_path
from ket.connection.database_url import shown_url
from ket.errors import StoreError
from ket.store.failure import describe
from ket.store.sql.failure import error_kind, hide_password

_LIST = "SELECT name, database_url FROM ket_tenants ORDER BY name"
_EXISTS = "SELECT 1 FROM ket_tenants WHERE false"


class RegistryReader:
    """Lists the registered tenants; every failure is a StoreError naming the registry."""

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = parse_url(url)
        self._file: Path | None = None
        self._params: dict[str, Any] = {}
        if parsed.get_backend_name() == "sqlite":
            self._file = sqlite_path(parsed)
            if self._file is None:  # memory or a `file:` URI: sqlite3 cannot open it alike
                raise StoreError(
                    f"the tenant registry must be a SQLite file or PostgreSQL, not "
                    f"{shown_url(url)!r}"
                )
        else:
            self._params = psycopg_params(parsed)

    def databases(self) -> dict[str, str | None]:
        """Tenant name -> its own database URL (None: the template's), by name."""
        return self.listing() or {}

    def listing(self) -> dict[str, str | None] | None:
        """`databases`, or None when the registry does not exist: `exists` and `databases` in
        one read (one connection, where the two take one each)."""
        try:
            rows = self._rows(_LIST)
        except StoreError:
            raise
        except Exception as error:
            raise self._unreadable(error) from error
        return None if rows is None else {name: database_url for name, database_url in rows}

    def exists(self) -> bool:
        """Whether the registry's table exists (its file, or database, and its table); a
        registry that cannot be reached raises StoreError rather than answer no."""
        try:
            return self._rows(_EXISTS) is not None
        except StoreError:
            raise
        except Exception as error:
            raise self._unreadable(error) from error

    def close(self) -> None:
        """Nothing is held between reads."""

    def _unreadable(self, error: Exception) -> StoreError:
        shown = shown_url(self.url)
        message = f"cannot open the tenant registry at {shown!r}: {describe(error)}"
        return error_kind(error)(hide_password(message, parse_url(self.url)))

    def _rows(self, query: str) -> list[tuple[Any, ...]] | None:
        """The rows of `query`; None when the registry does not exist."""
        return self._sqlite_rows(query) if self._file is not None else self._postgres_rows(query)

    def _sqlite_rows(self, query: str) -> list[tuple[Any, ...]] | None:
        """The rows of `query`; None when the registry does not exist."""
        assert self._file is not None
        if not self._file.exists():
            return None
        connection = sqlite3.connect(
            self._file, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None
        )
        try:
            return connection.execute(query).fetchall()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return None
            raise
        finally:
            connection.close()

    def _postgres_rows(self, query: str) -> list[tuple[Any, ...]] | None:
        """The rows of `query`; None when the registry does not exist."""
        import psycopg  # here: a worker on SQLite never needs it
        from psycopg import errors

        from ket.connection.goodbye import close_quietly_sync

        # the URL's parts as the engine passes them (a DSN rendered anew would turn a space
        # in `?options=-c%20search_path%3Dx` into a `+` that libpq keeps)
        own = self._params
        options = {k: v for k, v in connect_args().items() if k not in own}
        try:
            connection = psycopg.connect(autocommit=True, **own, **options)
        except psycopg.OperationalError as error:
            if missing_database(error, own.get("dbname")):
                return None
            raise
        try:
            return connection.execute(query).fetchall()
        except errors.UndefinedTable:
            return None
        finally:
            # counted by the budget (budget.held) until its server process is gone
            close_quietly_sync(connection)


def missing_database(error: Exception, name: str | None) -> bool:
    """Whether a failed connection failed because its database does not exist (the server
    refuses the connection itself, so the error has no SQLSTATE: its text is all there is)."""
    return name is not None and f'database "{name}" does not exist' in str(error)
