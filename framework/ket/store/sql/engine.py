"""Engines for the SQL store: URLs, drivers, and SQLite's locking and durability discipline.

SQLite commits durably by default (`PRAGMA synchronous=FULL`: a commit is on disk when it
returns, power loss included); `?synchronous=normal` on the URL trades that for speed (in WAL
mode the last commits can be lost on power loss or an OS crash, never on a process crash).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy
from sqlalchemy import URL, event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ket.errors import StoreError
from ket.store.database_file import ensure_sqlite_file
from ket.store.database_url import parse_database_url, shown_url

SQLITE_BUSY_TIMEOUT_S = 30.0
# SQLite's own levels of PRAGMA synchronous, chosen with ?synchronous= on a sqlite URL
SQLITE_SYNCHRONOUS = ("off", "normal", "full", "extra")
DEFAULT_SQLITE_SYNCHRONOUS = "full"
_SYNCHRONOUS = "synchronous"

# Pooled PostgreSQL connections must fail, not hang, when the network under them goes (a dropped
# route, a server gone without a reset): a statement would otherwise wait for TCP's own
# retransmission limit, about 15 minutes. libpq's keepalives notice a silent peer while waiting
# for an answer, tcp_user_timeout a request that is never acknowledged.
POSTGRES_CONNECT_ARGS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}

_ASYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite+aiosqlite"}
_SYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite"}


def parse_url(url: str | URL) -> URL:
    """A database URL ket can store jobs in, or StoreError naming it (never its password)."""
    parsed = parse_database_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgres":
        parsed = parsed.set(drivername="postgresql")
        backend = "postgresql"
    if backend not in _ASYNC_DRIVERS:
        raise StoreError(
            f"ket stores jobs in postgresql or sqlite databases, not {backend!r} "
            f"(from {shown_url(parsed)!r})"
        )
    if backend == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise StoreError(
            "an in-memory SQLite database is private to one connection; give a file path, "
            "e.g. sqlite:///.ket/default.db, or use the memory store"
        )
    if backend == "sqlite":
        sqlite_synchronous(parsed)
    return parsed


def sqlite_synchronous(url: str | URL) -> str:
    """The `?synchronous=` level of a SQLite URL (default full), or StoreError naming a bad one."""
    parsed = parse_database_url(url)
    value = parsed.query.get(_SYNCHRONOUS, DEFAULT_SQLITE_SYNCHRONOUS)
    if isinstance(value, str) and value.lower() in SQLITE_SYNCHRONOUS:
        return value.lower()
    given = value if isinstance(value, str) else "&".join(value)
    raise StoreError(
        f"synchronous must be one of {', '.join(SQLITE_SYNCHRONOUS)}, got {given!r} "
        f"(from {shown_url(parsed)!r})"
    )


def async_url(url: str | URL) -> URL:
    """The URL with ket's async driver (psycopg 3 or aiosqlite)."""
    parsed = parse_url(url)
    return _for_driver(parsed).set(drivername=_ASYNC_DRIVERS[parsed.get_backend_name()])


def sync_url(url: str | URL) -> URL:
    """The URL with ket's sync driver (psycopg 3 or sqlite3), for migrations from tools."""
    parsed = parse_url(url)
    return _for_driver(parsed).set(drivername=_SYNC_DRIVERS[parsed.get_backend_name()])


def _for_driver(parsed: URL) -> URL:
    """Without ket's own parameters, which the driver would not know (sqlite_discipline sets
    them)."""
    if parsed.get_backend_name() != "sqlite":
        return parsed
    return parsed.difference_update_query([_SYNCHRONOUS])


def libpq_dsn(url: str | URL) -> str:
    """A plain `postgresql://` URL for a raw psycopg connection (the listener)."""
    return parse_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def create_engine(url: str | URL, *, pool_size: int = 5, **options: Any) -> AsyncEngine:
    """An async engine for the URL, with SQLite set up for concurrent workers.

    The pool may open `pool_size` more connections under load unless `max_overflow` says
    otherwise; `pool_timeout` is how long a caller waits for a free one.
    """
    # SQLAlchemy's errors and logs would quote every parameter of a statement: job payloads
    # (secrets among them) and model rows. The database's own message is enough.
    options.setdefault("hide_parameters", True)
    # a pooled connection is checked before use, so the first operation after a database restart
    # or a killed backend does not fail on a dead one (the hot operations run on the lane)
    options.setdefault("pool_pre_ping", True)
    target = async_url(url)
    options.setdefault("max_overflow", pool_size)
    if target.get_backend_name() == "sqlite":
        connect_args = {"timeout": SQLITE_BUSY_TIMEOUT_S, "isolation_level": None}
        connect_args.update(options.pop("connect_args", {}))
        engine = create_async_engine(
            target, connect_args=connect_args, pool_size=pool_size, **options
        )
        sqlite_discipline(engine.sync_engine, sqlite_synchronous(url))
        return engine
    connect_args = postgres_connect_args(target, options.pop("connect_args", None))
    return create_async_engine(target, pool_size=pool_size, connect_args=connect_args, **options)


def postgres_connect_args(url: URL, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The keepalives and timeouts of POSTGRES_CONNECT_ARGS, then `given`; the URL's own
    parameters (e.g. ?connect_timeout=3) win over the defaults."""
    defaults = {k: v for k, v in POSTGRES_CONNECT_ARGS.items() if k not in url.query}
    return {**defaults, **(given or {})}


def create_sync_engine(url: str | URL, **options: Any) -> Engine:
    """A synchronous engine (sqlite3 or psycopg 3) for the URL, SQLite set up as for the store:
    for the client in application code, and the tenant registry."""
    engine = sqlalchemy.create_engine(sync_url(url), **options)
    if engine.dialect.name == "sqlite":
        sqlite_discipline(engine, sqlite_synchronous(url))
    return engine


def sqlite_discipline(engine: Engine, synchronous: str = DEFAULT_SQLITE_SYNCHRONOUS) -> None:
    """A private file (0600, made before SQLite would make it with the umask), WAL, a busy
    timeout, `synchronous` (one of SQLITE_SYNCHRONOUS), and BEGIN IMMEDIATE for every
    transaction.

    The driver's own transaction handling begins lazily and deferred, so two writers can both
    read and then fail to upgrade their lock ("database is locked") instead of waiting. Taking the
    write lock at BEGIN makes writers queue behind each other through the busy timeout.
    """
    if synchronous not in SQLITE_SYNCHRONOUS:
        raise StoreError(f"synchronous must be one of {SQLITE_SYNCHRONOUS}, got {synchronous!r}")
    ensure_sqlite_file(engine.url)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={synchronous.upper()}")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")
