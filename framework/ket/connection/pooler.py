"""A connection pooler (PgBouncer) between ket and PostgreSQL: found on each connection, not
configured, and what ket does about it.

PgBouncer answers a client's connection itself, with a backend pid of its own making, so a
connection whose `pg_backend_pid()` is not the pid announced at connect goes through a pooler.
Its pool mode cannot be seen from a client; ket assumes the least it could be:

- **transaction** (`pool_mode = transaction`): each transaction of a client may run on another
  server connection. A statement prepared on one is missing on the next, or is there already
  under its name on another client's (`prepared statement "_pg3_0" already exists`; PgBouncer
  before 1.21 passes the protocol's prepared statements through as they are), so ket prepares
  no statement on a pooled connection. LISTEN lands on a server connection that other clients
  use next: NOTIFY never reaches the listener, which finds so and polls (listener.py), unless
  KET_LISTEN_URL gives a direct way to the server (`listen_dsn`). Session settings that
  PgBouncer tracks per client (TimeZone, application_name) keep working; ket uses no other (its
  advisory locks are transaction-scoped).
- **session**: everything works; preparing nothing costs a little speed.
- **statement** (`pool_mode = statement`): transactions are refused, and ket cannot work:
  `refused_transactions` says so, naming the setting.

    listen_through("postgresql://app@db:5432")   # ket worker, from KET_LISTEN_URL
    listen_dsn("postgresql://app@pgbouncer:6432/erp_default")  # ...@db:5432/erp_default
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from ket import process
from ket.connection.address import connect_args, libpq_dsn, parse_url, psycopg_params
from ket.connection.database_url import parse_database_url, shown_url
from ket.connection.url import DatabaseUrl, is_postgres
from ket.errors import StoreError

log = logging.getLogger("ket.store.pooler")

LISTEN_URL = "KET_LISTEN_URL"
# the one round trip a new connection makes anyway: its server pid (a pooler's shows here) and
# the time zone its instants come back in (PgBouncer keeps it per client, as SET would)
FIRST_STATEMENT = "SELECT pg_backend_pid(), set_config('TimeZone', 'UTC', false)"
_STATEMENT_MODE = "statement pooling mode"  # in PgBouncer's refusal of a transaction


class Poolers:
    """The process's part (ket.process): what it found and was told about poolers."""

    def __init__(self) -> None:
        self.listen_url: DatabaseUrl | None = None  # KET_LISTEN_URL, parsed
        self.said: set[str] = set()  # databases whose pooler was logged already
        self.transactions: set[str] = set()  # pooled databases seen to hold a transaction


def _state() -> Poolers:
    return process.current().part(Poolers)


class PoolerRefused(StoreError):
    """The connection pooler in front of the database refuses what ket needs."""


def pooled(connection: psycopg.AsyncConnection[Any] | psycopg.Connection[Any], pid: int) -> bool:
    """Whether `connection`, whose server says it is process `pid`, goes through a pooler; if
    so, nothing is prepared on it from now on (and this is logged once per database)."""
    if connection.info.backend_pid == pid:
        return False
    connection.prepare_threshold = None
    place = where(connection)
    state = _state()
    if place not in state.said:
        state.said.add(place)
        log.info(
            "%s goes through a connection pooler (PgBouncer?): ket prepares no statement on it%s",
            place,
            ""
            if state.listen_url is not None
            else "; if it pools transactions, NOTIFY does not reach a LISTEN through it: set "
            f"{LISTEN_URL} to a URL of the server that bypasses the pooler, or workers poll",
        )
    return True


def check_pooled(dbapi_connection: Any) -> bool:
    """`pooled` for a connection SQLAlchemy just opened (its engines' connect event, psycopg's
    or its asyncio adapter of it): one round trip, its transaction rolled back."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("SELECT pg_backend_pid()")
        row = cursor.fetchone()
    finally:
        cursor.close()
    # not left in a transaction: SQLAlchemy's AUTOCOMMIT could not be set on it
    dbapi_connection.rollback()
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    return row is not None and pooled(driver, int(row[0]))


def refused_transactions(error: BaseException, where: str) -> PoolerRefused | None:
    """The error to raise when `error` is a pooler refusing transactions, else None."""
    if not isinstance(error, psycopg.Error) or _STATEMENT_MODE not in str(error):
        return None
    return PoolerRefused(
        f"{where} goes through a pooler in statement mode (PgBouncer's pool_mode = "
        "statement), which refuses transactions, and ket's claims and outcomes are "
        "transactions: give ket a pool with pool_mode = transaction or session for this "
        "database, or a URL that bypasses the pooler"
    )


async def check_transactions(connection: psycopg.AsyncConnection[Any], where: str) -> None:
    """PoolerRefused when a pooled connection cannot hold a transaction (statement mode);
    tried once per database that did."""
    seen = _state().transactions
    if where in seen:
        return
    try:
        async with connection.transaction():
            pass
    except psycopg.Error as error:
        refused = refused_transactions(error, where)
        if refused is not None:
            raise refused from error
        raise
    seen.add(where)


def listen_through(url: str | None) -> None:
    """Send this process's LISTEN connections to `url`'s server (KET_LISTEN_URL) instead of the
    one the database URL names: its host, port, user, password and options, and its database
    when it names one; None: to the database URL's own. StoreError naming a bad value (never
    its password)."""
    state = _state()
    if url is None or not url.strip():
        state.listen_url = None
        return
    parsed = parse_database_url(url.strip())
    backend = parsed.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise StoreError(
            f"{LISTEN_URL} must be a postgresql:// URL of the server, got {shown_url(parsed)!r}"
        )
    if "{tenant}" in (parsed.database or ""):
        raise StoreError(
            f"{LISTEN_URL} names one database or none (ket listens on the workers' control "
            f"database), not a template: got {shown_url(parsed)!r}"
        )
    state.listen_url = parsed.set(drivername="postgresql")


def listen_dsn(dsn: str) -> str:
    """Where to LISTEN for the database `dsn` names: through KET_LISTEN_URL when set (the
    database kept unless that URL names its own), else `dsn` itself."""
    listen_url = _state().listen_url
    if listen_url is None:
        return dsn
    database = listen_url.database or parse_database_url(dsn).database
    return listen_url.set(database=database).render_as_string(hide_password=False)


def check_start(tenant_url: str, control_url: str) -> None:
    """Before a worker serves anything: PoolerRefused when the pooler in front of a tenant's
    database or the control database refuses transactions, StoreError when KET_LISTEN_URL
    reaches another database than the control database. A database that cannot be reached now
    is not checked here (the worker waits for it, as for any outage)."""
    for url in dict.fromkeys((tenant_url, control_url)):
        if is_postgres(url):
            _check_database(url)
    if _state().listen_url is not None and is_postgres(control_url):
        _check_listen(control_url)


def _connect(url: str) -> psycopg.Connection[Any] | None:
    params = psycopg_params(parse_url(url))
    options = {k: v for k, v in connect_args().items() if k not in params}
    try:
        return psycopg.connect(autocommit=True, **params, **options)
    except psycopg.OperationalError:
        return None


def _check_database(url: str) -> None:
    connection = _connect(url)
    if connection is None:
        return
    with connection:
        row = connection.execute(FIRST_STATEMENT, prepare=False).fetchone()
        if row is None or not pooled(connection, int(row[0])):
            return
        try:
            with connection.transaction():
                pass
        except psycopg.Error as error:
            refused = refused_transactions(error, f"database {shown_url(url)!r}")
            if refused is not None:
                raise refused from error


def _check_listen(control_url: str) -> None:
    direct = listen_dsn(libpq_dsn(control_url))
    names = []
    for url in (control_url, direct):
        connection = _connect(url)
        if connection is None:
            return
        with connection:
            row = connection.execute("SELECT current_database()", prepare=False).fetchone()
            names.append(row[0] if row is not None else None)
    if names[0] != names[1]:
        raise StoreError(
            f"{LISTEN_URL} reaches database {names[1]!r} ({shown_url(direct)!r}), but the "
            f"workers' wake-ups are sent on the control database {names[0]!r} "
            f"({shown_url(control_url)!r}): point {LISTEN_URL} at that database's server, "
            "with no database or that one"
        )


def where(connection: psycopg.AsyncConnection[Any] | psycopg.Connection[Any]) -> str:
    """The database of `connection` as logs and errors name it (no user, no password)."""
    params = connection.info.get_parameters()
    host, port, name = params.get("host", ""), params.get("port", ""), params.get("dbname", "")
    return f"database {name!r} at {host}:{port}"
