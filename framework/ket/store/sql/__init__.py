"""The SQL store: PostgreSQL (psycopg 3) and SQLite through SQLAlchemy 2 Core.

Its names are imported on first use, so that importing one module of the package (the lane, the
listener) loads neither the others nor SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ket.store.sql.migration import LATEST, MIGRATIONS, migrate, schema_version
    from ket.store.sql.store import SqlStore, SqlTransaction, insert_on

_HOMES = {
    "LATEST": "ket.store.sql.migration",
    "MIGRATIONS": "ket.store.sql.migration",
    "migrate": "ket.store.sql.migration",
    "schema_version": "ket.store.sql.migration",
    "SqlStore": "ket.store.sql.store",
    "SqlTransaction": "ket.store.sql.store",
    "insert_on": "ket.store.sql.store",
}

__all__ = [
    "LATEST",
    "MIGRATIONS",
    "SqlStore",
    "SqlTransaction",
    "insert_on",
    "migrate",
    "schema_version",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ket.store.sql' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
