"""The tenant registry: which tenants exist and, optionally, where each one's database is.

It lives in a database of its own (`KET_REGISTRY_URL`, default `.ket/registry.db`), which every
worker reads on each tenant refresh.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, MetaData, Table, Text, create_engine, delete, insert, select
from sqlalchemy.exc import IntegrityError

from ket.errors import StoreError
from ket.store.failure import translated
from ket.store.sql.column import Instant
from ket.store.sql.engine import sqlite_discipline, sync_url
from ket.store.sql.failure import database_error, hide_password

TENANT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")

_metadata = MetaData()
tenants = Table(
    "ket_tenants",
    _metadata,
    Column("name", Text, primary_key=True),
    Column("database_url", Text),
    Column("created_at", Instant, nullable=False),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenant:
    """A registered tenant; `database_url` None means the deployment's URL template."""

    name: str
    database_url: str | None = None


def check_tenant_name(name: str) -> str:
    """A tenant name safe for database and file names, or StoreError naming it."""
    if not TENANT_NAME.fullmatch(name):
        raise StoreError(
            f"tenant name {name!r} must be 1-63 lowercase letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class TenantRegistry:
    """Add, list and remove tenants (synchronous: used by the CLI and, in a thread, the worker).

    Every method raises StoreError (its cause the database's error) and nothing else. A
    connection the server dropped (a restart, say) fails the call that meets it; the pool
    replaces it, so the next call works.
    """

    def __init__(self, url: str) -> None:
        target = sync_url(url)
        with translated():
            self._engine = create_engine(target)
        if self._engine.dialect.name == "sqlite":
            sqlite_discipline(self._engine)
        self.url = url
        shown = target.render_as_string(hide_password=True)
        try:
            _metadata.create_all(self._engine)
        except Exception as error:
            reason = database_error(error, self._engine).message
            raise StoreError(
                hide_password(f"cannot open the tenant registry at {shown!r}: {reason}", target)
            ) from error

    def list(self) -> list[Tenant]:
        """Every registered tenant, by name."""
        with self._translated(), self._engine.begin() as connection:
            rows = connection.execute(select(tenants).order_by(tenants.c.name)).all()
        return [Tenant(name=row.name, database_url=row.database_url) for row in rows]

    def add(self, name: str, database_url: str | None = None) -> Tenant:
        """Register a tenant; StoreError if it exists already."""
        check_tenant_name(name)
        try:
            with self._translated(), self._engine.begin() as connection:
                connection.execute(
                    insert(tenants).values(
                        name=name, database_url=database_url, created_at=datetime.now(UTC)
                    )
                )
        except StoreError as error:
            if isinstance(error.__cause__, IntegrityError):
                raise StoreError(f"tenant {name!r} is already registered") from None
            raise
        return Tenant(name=name, database_url=database_url)

    def remove(self, name: str) -> bool:
        """Unregister a tenant (its database is left alone); False if it was not registered."""
        with self._translated(), self._engine.begin() as connection:
            removed = connection.execute(delete(tenants).where(tenants.c.name == name)).rowcount
        return bool(removed)

    def close(self) -> None:
        """Close the registry's connections."""
        with self._translated():
            self._engine.dispose()

    def _translated(self) -> AbstractContextManager[None]:
        return translated(lambda error: database_error(error, self._engine))
