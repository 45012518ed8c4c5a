"""A fresh PostgreSQL database for every run, dropped afterwards even when the run fails."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import LiteralString
from urllib.parse import urlsplit, urlunsplit

import psycopg
from interrupt import signals_held
from psycopg import sql

ADMIN_URL_ENV = "KET_CMP_ADMIN_URL"
DEFAULT_ADMIN_URL = "postgresql://root@127.0.0.1:5432/postgres"


@dataclass(frozen=True, kw_only=True)
class Database:
    """One benchmark database: its name and a URL both libraries accept."""

    name: str
    url: str


def admin_url() -> str:
    return os.environ.get(ADMIN_URL_ENV, DEFAULT_ADMIN_URL)


def _drop(admin: psycopg.Connection, name: str) -> None:
    admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextmanager
def fresh_database() -> Iterator[Database]:
    """`DROP DATABASE ... WITH (FORCE)` + `CREATE DATABASE` of a new `ket_cmp_<random>`."""
    name = f"ket_cmp_{secrets.token_hex(5)}"
    base = admin_url()
    try:  # the drop is IF EXISTS, so it is safe whenever the create was interrupted
        with signals_held(), psycopg.connect(base, autocommit=True) as admin:
            _drop(admin, name)
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield Database(name=name, url=urlunsplit(urlsplit(base)._replace(path=f"/{name}")))
    finally:
        with signals_held(), psycopg.connect(base, autocommit=True) as admin:
            _drop(admin, name)


def connect(database: Database) -> psycopg.Connection:
    """An autocommit connection for the harness's own reads (counts, timestamps, ANALYZE)."""
    return psycopg.connect(database.url, autocommit=True)


def server_version() -> str:
    with psycopg.connect(admin_url(), autocommit=True) as admin:
        row = admin.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def count(connection: psycopg.Connection, query: LiteralString) -> int:
    """The single integer a COUNT query returns."""
    row = connection.execute(query).fetchone()
    return int(row[0]) if row else 0
