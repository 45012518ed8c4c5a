"""Reading the tenant registry without SQLAlchemy: what a worker does on every tenant refresh.

`TenantRegistry` (registry.py) adds, checks and removes tenants through SQLAlchemy; a worker only
lists them, so it reads the same table with the drivers alone: the standard library's sqlite3
for a SQLite registry, psycopg for a PostgreSQL one (a connection per read: a refresh comes every
`tenant_refresh_ms`, and a connection the server dropped cannot fail the next one). A registry
that does not exist yet (no file, no table) lists no tenants and is not created by reading it:
`ket tenants add` creates it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ket.errors import StoreError
from ket.store.database_file import sqlite_path
from ket.store.database_url import shown_url
from ket.store.failure import describe
from ket.store.sql.address import (
    POSTGRES_CONNECT_ARGS,
    SQLITE_BUSY_TIMEOUT_S,
    libpq_dsn,
    parse_url,
)
from ket.store.sql.failure import hide_password

_LIST = "SELECT name, database_url FROM ket_tenants ORDER BY name"


class RegistryReader:
    """Lists the registered tenants; every failure is a StoreError naming the registry."""

    def __init__(self, url: str) -> None:
        self.url = url
        parsed = parse_url(url)
        self._file: Path | None = None
        self._dsn: str | None = None
        if parsed.get_backend_name() == "sqlite":
            self._file = sqlite_path(parsed)
            if self._file is None:  # memory or a `file:` URI: sqlite3 cannot open it alike
                raise StoreError(
                    f"the tenant registry must be a SQLite file or PostgreSQL, not "
                    f"{shown_url(url)!r}"
                )
        else:
            self._dsn = libpq_dsn(parsed)

    def databases(self) -> dict[str, str | None]:
        """Tenant name -> its own database URL (None: the template's), by name."""
        try:
            rows = self._sqlite_rows() if self._file is not None else self._postgres_rows()
        except StoreError:
            raise
        except Exception as error:
            shown = shown_url(self.url)
            message = f"cannot open the tenant registry at {shown!r}: {describe(error)}"
            raise StoreError(hide_password(message, parse_url(self.url))) from error
        return {name: database_url for name, database_url in rows}

    def close(self) -> None:
        """Nothing is held between reads."""

    def _sqlite_rows(self) -> list[tuple[Any, ...]]:
        assert self._file is not None
        if not self._file.exists():
            return []
        connection = sqlite3.connect(
            self._file, timeout=SQLITE_BUSY_TIMEOUT_S, isolation_level=None
        )
        try:
            return connection.execute(_LIST).fetchall()
        except sqlite3.OperationalError as error:
            if "no such table" in str(error):
                return []
            raise
        finally:
            connection.close()

    def _postgres_rows(self) -> list[tuple[Any, ...]]:
        assert self._dsn is not None
        import psycopg  # here: a worker on SQLite never needs it
        from psycopg import errors
        from psycopg.conninfo import conninfo_to_dict

        own = conninfo_to_dict(self._dsn)
        options = {k: v for k, v in POSTGRES_CONNECT_ARGS.items() if k not in own}
        with psycopg.connect(self._dsn, autocommit=True, **options) as connection:
            try:
                return connection.execute(_LIST).fetchall()
            except errors.UndefinedTable:
                return []
