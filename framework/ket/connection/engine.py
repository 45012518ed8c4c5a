"""Engines for the SQL store: URLs, drivers, and SQLite's locking and durability discipline.

SQLite commits durably by default (`PRAGMA synchronous=FULL`: a commit is on disk when it
returns, power loss included); `?synchronous=normal` on the URL trades that for speed (in WAL
mode the last commits can be lost on power loss or an OS crash, never on a process crash).
"""

from __future__ import annotations

import socket
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import sqlalchemy
from sqlalchemy import URL, event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ket.connection import budget, pooler
from ket.connection.address import (
    DEFAULT_SQLITE_SYNCHRONOUS,
    POSTGRES_CONNECT_ARGS,
    SQLITE_BUSY_TIMEOUT_S,
    SQLITE_SYNCHRONOUS,
    SYNCHRONOUS,
    libpq_dsn,
    parse_url,
    postgres_connect_args,
    psycopg_params,
    sqlite_synchronous,
)
from ket.connection.database_file import ensure_sqlite_file
from ket.connection.goodbye import gone, mark_leaving, peer_of, server_gone
from ket.connection.url import DatabaseUrl, to_sqlalchemy
from ket.errors import StoreError

_ASYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite+aiosqlite"}
_SYNC_DRIVERS = {"postgresql": "postgresql+psycopg", "sqlite": "sqlite"}


def async_url(url: str | URL | DatabaseUrl) -> URL:
    """The URL with ket's async driver (psycopg 3 or aiosqlite)."""
    parsed = parse_url(url)
    driver = _ASYNC_DRIVERS[parsed.get_backend_name()]
    return to_sqlalchemy(_for_driver(parsed).set(drivername=driver))


def sync_url(url: str | URL | DatabaseUrl) -> URL:
    """The URL with ket's sync driver (psycopg 3 or sqlite3), for migrations from tools."""
    parsed = parse_url(url)
    driver = _SYNC_DRIVERS[parsed.get_backend_name()]
    return to_sqlalchemy(_for_driver(parsed).set(drivername=driver))


def _for_driver(parsed: DatabaseUrl) -> DatabaseUrl:
    """Without ket's own parameters, which the driver would not know (sqlite_discipline sets
    them)."""
    if parsed.get_backend_name() != "sqlite":
        return parsed
    return parsed.difference_update_query([SYNCHRONOUS])


def create_engine(
    url: str | URL | DatabaseUrl, *, pool_size: int = 5, **options: Any
) -> AsyncEngine:
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
    spent = budget.current(url)
    if spent is not None and "async_creator" not in options:
        options["async_creator"] = _budgeted_creator(spent, parse_url(url), connect_args)
    engine = create_async_engine(target, pool_size=pool_size, connect_args=connect_args, **options)
    event.listen(engine.sync_engine, "connect", _unprepared_behind_pooler)
    if spent is not None:
        PoolHolder(engine, spent)  # kept alive by the engine's events it listens to
    return engine


def _budgeted_creator(
    spent: budget.ConnectionBudget, url: DatabaseUrl, connect_args: dict[str, Any]
) -> Callable[[], Awaitable[Any]]:
    """Opens the engine's connections within the process's budget, with the parameters
    SQLAlchemy's psycopg dialect would pass (`psycopg_params`)."""
    import psycopg

    params = {**psycopg_params(url), **connect_args}

    async def open_one() -> Any:
        return await psycopg.AsyncConnection.connect(**params)

    async def create() -> Any:
        return await spent.connect(open_one, kind="engine")

    return create


class PoolHolder:
    """An engine's pool as the budget sees it: idle while a connection sits in it, unused
    (however many others are checked out), and shed one idle connection at a time (the
    pool opens another when it needs one)."""

    kind = "engine"

    def __init__(self, engine: AsyncEngine, spent: budget.ConnectionBudget) -> None:
        self._engine = weakref.ref(engine)
        self._budget = spent
        self._idle_at: float | None = None
        event.listen(engine.sync_engine, "checkin", self._checked_in)

    def _checked_in(self, *_: Any) -> None:
        # Idle as soon as one connection is back, not once none is checked out: SQLAlchemy
        # counts a connection it is still opening (waiting for the budget's room) as checked
        # out, so handlers waiting in ctx.tx for room at the engines' share kept their own
        # pool from ever looking idle, and waited for its idle connections until their jobs
        # timed out (8 handlers at --max-connections 6; a worker at 4 wedged on one tenant).
        # "checkin" fires before the connection is back in the pool: none there yet means
        # this one is the first to sit idle.
        pool = self._pool()
        if pool is not None:
            if pool.checkedin() == 0:
                self._idle_at = time.monotonic()
            self._budget.released(self)

    def _pool(self) -> Any:
        engine = self._engine()
        return None if engine is None else engine.sync_engine.pool

    def idle_since(self) -> float | None:
        pool = self._pool()
        if pool is None or not pool.checkedin():
            return None
        return self._idle_at

    async def shed(self, older_than: float | None = None) -> int:
        """Close the pool's idle connections (all of them when they went idle before
        `older_than`, else one), leaving those checked out alone: disposing of the whole
        pool would orphan a connection still being opened for it."""

        pool = self._pool()
        since = self.idle_since()
        if pool is None or since is None or (older_than is not None and since > older_than):
            return 0
        most = 1 if older_than is None else None
        closed = await close_idle(pool, most)
        if closed:
            self._budget.released()
        return closed


async def close_idle(pool: Any, most: int | None = None) -> int:
    """Close up to `most` (None: all) of the connections idle in an engine's pool; return once
    their server processes are gone, counted by the budget until then (connection/goodbye.py):
    the server would otherwise see one more than the budget."""
    from sqlalchemy.util import greenlet_spawn

    if not hasattr(pool, "_pool"):  # not a queue of idle connections (a NullPool keeps none)
        return 0
    peers: list[tuple[socket.socket | None, Any]] = []
    closed: int = await greenlet_spawn(_close_idle, pool, most, peers)
    for peer, raw in peers:
        try:
            await server_gone(peer)
        finally:
            gone(raw)
    return closed


def _close_idle(pool: Any, most: int | None, peers: list[tuple[socket.socket | None, Any]]) -> int:
    """Close up to `most` (None: every one) of the connections idle in a QueuePool, as the pool
    closes one returned to it when it is full (its record closed, its overflow counted down);
    `peers` gets a handle on each one's socket, to hear its server hang up."""
    from sqlalchemy.util import queue

    closed = 0
    while most is None or closed < most:
        try:
            record = pool._pool.get(False)
        except queue.Empty:
            break
        raw = getattr(record.dbapi_connection, "_connection", None)  # psycopg's, under the adapter
        peer = peer_of(raw) if isinstance(raw, psycopg.AsyncConnection) else None
        if peer is not None:
            mark_leaving(raw)
        peers.append((peer, raw))
        try:
            record.close()
        finally:
            pool._dec_overflow()
        closed += 1
    return closed


def create_sync_engine(url: str | URL | DatabaseUrl, **options: Any) -> Engine:
    """A synchronous engine (sqlite3 or psycopg 3) for the URL, SQLite set up as for the store:
    for the client in application code, and the tenant registry."""
    engine = sqlalchemy.create_engine(sync_url(url), **options)
    if engine.dialect.name == "sqlite":
        sqlite_discipline(engine, sqlite_synchronous(url))
    else:
        event.listen(engine, "connect", _unprepared_behind_pooler)
    return engine


def _unprepared_behind_pooler(dbapi_connection: Any, _record: Any) -> None:
    """Behind a pooler (PgBouncer), the engine's connections prepare nothing (pooler.py)."""
    pooler.check_pooled(dbapi_connection)


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


__all__ = [
    "DEFAULT_SQLITE_SYNCHRONOUS",
    "POSTGRES_CONNECT_ARGS",
    "SQLITE_BUSY_TIMEOUT_S",
    "SQLITE_SYNCHRONOUS",
    "async_url",
    "create_engine",
    "create_sync_engine",
    "libpq_dsn",
    "parse_url",
    "postgres_connect_args",
    "sqlite_discipline",
    "sqlite_synchronous",
    "sync_url",
]
