"""The application's own connection, as the insert plan runs on it (`enqueue(connection=...)`).

An app enqueues inside its own transaction on the connection it already holds: a SQLAlchemy
`Connection`, `AsyncConnection` or `AsyncSession`; a psycopg 3 `Connection` or `AsyncConnection`;
or Django's connection (the postgresql backend on psycopg 3). Each becomes here the rows the
insert plan runs on (insert.py), so the insert exists once: on SQLAlchemy the plan's statements
are built for the connection's dialect; on psycopg, and on Django's connection through the
psycopg connection under it, they run as the generated PostgreSQL text the worker's lane runs
(statement.py; synchronously on psycopg's own cursor class, which binds parameters on the
server, whatever cursor class the connection makes by default: Django's bind on the client).

A psycopg connection in autocommit mode and outside a transaction (Django's outside `atomic()`)
gets a transaction of its own for the plan's statements: the jobs commit at once, all or none.

Each also says which database it is on (`database`, app_database.py) and which driver
connection it runs on (`driver`), for the client to refuse one on another tenant's database.

Where ket can see the application's commit it hands the caller a hook that runs a callable
after it (`on_commit`), for the wake-ups: Django's `on_commit` on the connection's alias, an
AsyncSession's `after_commit` event. A SQLAlchemy or psycopg connection has none that fires
after the commit, so it gets no hook.

Nothing here imports Django, nor SQLAlchemy unless the application hands it a session: a
connection of theirs is recognised once the application has loaded them.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import psycopg
from psycopg.pq import TransactionStatus

from ket.errors import ConnectionRejected, StoreError
from ket.store.failure import describe
from ket.store.sql.app_database import (
    Database,
    async_engine_database,
    async_psycopg_database,
    engine_database,
    psycopg_database,
)
from ket.store.sql.failure import database_error, driver_error
from ket.store.sql.fetch import ConnectionRows, EngineRows, Rows, SyncRows
from ket.store.sql.lane import LaneConnection, text_of
from ket.store.sql.statement import Statement

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
    from sqlalchemy.orm import Session

SYNC_TAKES = (
    "a SQLAlchemy Connection, a psycopg 3 Connection, or Django's connection "
    "(django.db.connection or connections[alias], on the postgresql backend with psycopg 3)"
)
ASYNC_TAKES = "a SQLAlchemy AsyncConnection or AsyncSession, or a psycopg 3 AsyncConnection"


@dataclass(frozen=True, slots=True)
class AppConnection:
    """An application's synchronous connection, ready for the insert plan."""

    rows: SyncRows
    failure: Callable[[Exception], StoreError]
    # the plan's own transaction: a real one for a psycopg connection in autocommit mode and in
    # no transaction, else nothing (the application's transaction holds the statements)
    transaction: Callable[[], AbstractContextManager[Any]]
    # which database the connection is on, asked in its transaction (app_database.py)
    database: Callable[[], Database]
    # the driver's connection under it: what the client remembers as found on its tenant's
    driver: object
    # runs a callable once the application's transaction commits (Django's on_commit), or None
    on_commit: Callable[[Callable[[], None]], None] | None = None


@dataclass(frozen=True, slots=True)
class AsyncAppConnection:
    """An application's asyncio connection, ready for the insert plan."""

    rows: Rows
    failure: Callable[[Exception], StoreError]
    transaction: Callable[[], AbstractAsyncContextManager[Any]]
    database: Callable[[], Awaitable[Database]]
    driver: object
    # runs a callable once the application's transaction commits (an AsyncSession's), or None
    on_commit: Callable[[Callable[[], None]], None] | None = None


class PsycopgRows:
    """`SyncRows` on a synchronous psycopg connection: the lane's statements and parameters."""

    dialect = "postgresql"

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.raw = connection

    def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        sql = text_of(statement)
        # a cursor of psycopg's own class: Django's connections make client-side ones
        with psycopg.Cursor(self.raw) as cursor:
            cursor.execute(sql.text, sql.params(params))
            return cursor.fetchall() if cursor.description is not None else []

    def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        sql = text_of(statement)
        with psycopg.Cursor(self.raw) as cursor:
            cursor.executemany(sql.text, [sql.params(p) for p in params], returning=sql.returning)
            found: list[Any] = []
            while sql.returning:
                found.extend(cursor.fetchall())
                if not cursor.nextset():
                    break
            return found


def app_connection(connection: object) -> AppConnection:
    """`connection` (see SYNC_TAKES) as the insert plan runs on it; ConnectionRejected for
    anything else, naming what it got."""
    engine_connection = _loaded("sqlalchemy.engine", "Connection")
    if engine_connection is not None and isinstance(connection, engine_connection):
        sync = cast("Connection", connection)
        engine = sync.engine
        try:
            driver = sync.connection.driver_connection  # a closed connection says so here
        except Exception as error:
            raise database_error(error, engine) from error
        return AppConnection(
            ConnectionRows(sync),
            lambda error: database_error(error, engine),
            nullcontext,
            lambda: engine_database(sync),
            driver,
        )
    if isinstance(connection, psycopg.Connection):
        return _psycopg(connection)
    if _from_django(connection):
        return _django(connection)
    hint = "; an asyncio connection goes to open_async_client's aenqueue"
    hint = hint if _is_async(connection) else ""
    raise ConnectionRejected(f"connection= takes {SYNC_TAKES}; got {_kind(connection)}{hint}")


async def async_app_connection(connection: object) -> AsyncAppConnection:
    """`connection` (see ASYNC_TAKES) as the insert plan runs on it; an AsyncSession gives the
    connection of its current transaction (beginning one, as its next statement would)."""
    session = _loaded("sqlalchemy.ext.asyncio", "AsyncSession")
    on_commit = None
    if session is not None and isinstance(connection, session):
        held = cast("AsyncSession", connection)
        # a session bound to a connection rather than an engine: that connection's engine
        bind = cast("AsyncEngine | None", getattr(held.bind, "engine", held.bind))
        try:
            connection = await held.connection()
        except Exception as error:
            raise (database_error(error, bind) if bind is not None else error) from error
        on_commit = _after_commit(held.sync_session)
    engine_connection = _loaded("sqlalchemy.ext.asyncio", "AsyncConnection")
    if engine_connection is not None and isinstance(connection, engine_connection):
        app = cast("AsyncConnection", connection)
        engine = app.engine
        try:
            driver = (await app.get_raw_connection()).driver_connection
        except Exception as error:
            raise database_error(error, engine) from error
        return AsyncAppConnection(
            EngineRows(app),
            lambda error: database_error(error, engine),
            nullcontext,
            lambda: async_engine_database(app),
            driver,
            on_commit,
        )
    if isinstance(connection, psycopg.AsyncConnection):
        raw = connection
        own = raw.autocommit and raw.info.transaction_status == TransactionStatus.IDLE
        return AsyncAppConnection(
            LaneConnection(raw),
            lambda error: driver_error(error, raw.info),
            raw.transaction if own else nullcontext,
            lambda: async_psycopg_database(raw),
            raw,
        )
    hint = "; a synchronous connection goes to open_client's enqueue"
    hint = hint if _is_sync(connection) else ""
    raise ConnectionRejected(f"connection= takes {ASYNC_TAKES}; got {_kind(connection)}{hint}")


def _psycopg(
    raw: psycopg.Connection[Any], on_commit: Callable[[Callable[[], None]], None] | None = None
) -> AppConnection:
    own = raw.autocommit and raw.info.transaction_status == TransactionStatus.IDLE
    return AppConnection(
        PsycopgRows(raw),
        lambda error: driver_error(error, raw.info),
        raw.transaction if own else nullcontext,
        lambda: psycopg_database(raw),
        raw,
        on_commit,
    )


def _django(connection: Any) -> AppConnection:
    """Django's connection (a DatabaseWrapper, or the proxy `django.db.connection`): the psycopg
    connection under it, in Django's transaction, with Django's on_commit as the hook."""
    alias = getattr(connection, "alias", "?")
    vendor = getattr(connection, "vendor", "?")
    if vendor != "postgresql":
        raise ConnectionRejected(
            f"connection=: Django's connection {alias!r} is on {vendor}, and ket joins a Django "
            "transaction on PostgreSQL only (django.db.backends.postgresql with psycopg 3); "
            "enqueue without connection= instead (the job then commits on its own)"
        )
    try:
        connection.ensure_connection()
    except Exception as error:
        password = connection.settings_dict.get("PASSWORD") or ""
        message = f"Django's connection {alias!r} failed: {describe(error)}"
        raise StoreError(message.replace(password, "***") if password else message) from error
    raw = connection.connection
    if not isinstance(raw, psycopg.Connection):
        raise ConnectionRejected(
            f"connection=: Django's connection {alias!r} runs on {_kind(raw)}, and ket needs "
            "psycopg 3 under it (Django 4.2+ uses psycopg 3 when it is installed: uninstall "
            "psycopg2)"
        )
    # a query after a failed one in atomic() is refused as Django itself refuses it
    connection.validate_no_broken_transaction()
    hook = None
    if connection.in_atomic_block or connection.get_autocommit():

        def hook(run: Callable[[], None]) -> None:
            # robust: a hint that fails is logged by Django, never raised into the app's code
            connection.on_commit(run, robust=True)

    return _psycopg(raw, hook)


def _after_commit(session: Session) -> Callable[[Callable[[], None]], None]:
    """A hook running callables once `session` commits its outermost transaction; its rollback
    drops them. One pair of listeners per session, whatever the number of enqueues."""

    def hook(run: Callable[[], None]) -> None:
        pending = session.info.get(_PENDING)
        if pending is None:
            from sqlalchemy import event

            pending = session.info[_PENDING] = []
            event.listen(session, "after_commit", _committed)
            event.listen(session, "after_rollback", _rolled_back)
        pending.append(run)

    return hook


# the Session.info key of the callables waiting for the session's commit
_PENDING = "ket.after_commit"


def _committed(session: Session) -> None:
    # a savepoint's release fires after_commit too, with the outer transaction still open
    if session.in_nested_transaction():
        return
    pending: list[Callable[[], None]] = session.info.get(_PENDING, [])
    runs, pending[:] = list(pending), []
    for run in runs:
        run()


def _rolled_back(session: Session) -> None:
    # a savepoint's rollback keeps them: the jobs enqueued outside it may still commit (and a
    # hint for a job that is gone costs a worker one empty claim)
    if not session.in_nested_transaction():
        session.info.get(_PENDING, [])[:] = []


def _loaded(module: str, name: str) -> type | None:
    """The class `name` of `module` if the application has imported that module, else None."""
    kind = getattr(sys.modules.get(module), name, None)
    return kind if isinstance(kind, type) else None


def _from_django(connection: object) -> bool:
    # the proxy django.db.connection forwards every attribute to connections["default"]
    return type(connection).__module__.startswith("django.") and hasattr(
        connection, "ensure_connection"
    )


def _is_async(connection: object) -> bool:
    return isinstance(connection, psycopg.AsyncConnection) or any(
        (kind := _loaded("sqlalchemy.ext.asyncio", name)) is not None
        and isinstance(connection, kind)
        for name in ("AsyncConnection", "AsyncSession")
    )


def _is_sync(connection: object) -> bool:
    kind = _loaded("sqlalchemy.engine", "Connection")
    return (
        isinstance(connection, psycopg.Connection)
        or (kind is not None and isinstance(connection, kind))
        or _from_django(connection)
    )


def _kind(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


__all__ = ["AppConnection", "AsyncAppConnection", "app_connection", "async_app_connection"]
