"""The SQL store: PostgreSQL (psycopg 3) and SQLite through SQLAlchemy 2 Core."""

from ket.store.sql.migration import LATEST, MIGRATIONS, migrate, schema_version
from ket.store.sql.store import SqlStore, SqlTransaction, insert_on

__all__ = [
    "LATEST",
    "MIGRATIONS",
    "SqlStore",
    "SqlTransaction",
    "insert_on",
    "migrate",
    "schema_version",
]
