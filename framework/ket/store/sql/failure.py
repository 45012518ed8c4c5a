"""The SQL store's failures as StoreError: the database's words, never its password.

Every way a SqlStore, its transactions and the tenant registry reach the database ends in
`database_error`, so SQLAlchemy's and the drivers' exceptions (and asyncio's timeouts) never
escape: a pool with no free connection says so with its size and timeout, a database without
ket's tables says to run `ket migrate`, and anything else gives the driver's first line.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, Any

from ket.connection.budget import no_room
from ket.errors import NoRoom, NotMigrated, StoreError, StoreUnavailable
from ket.store.failure import describe

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.ext.asyncio import AsyncEngine

# The drivers' own exceptions, met where ket uses a driver connection directly (COPY): by module,
# so that this module does not import a driver a deployment may not use.
_DRIVERS = frozenset({"psycopg", "psycopg_pool", "sqlite3", "aiosqlite"})
_MISSING_TABLE = ("no such table: ket_", 'relation "ket_')
_MISSING_NAME = re.compile(r'(?:no such table: |relation ")(ket_\w+)')
# a column missing: SQLite names the column alone, PostgreSQL its ket table too
_MISSING_COLUMN = re.compile(
    r'no such column: (?P<column>\w+)\b|column (?:ket_\w+\.(?P<qualified>\w+)|"(?P<quoted>\w+)" '
    r'of relation "ket_\w+") does not exist'
)
# the columns later migrations add to the tables of earlier ones: one missing means the
# database is older than this ket (tests/unit/store/test_sql_failure.py keeps this list equal to
# the migrations' ADD COLUMN); an app's own columns are not among them
LATER_COLUMNS = frozenset(
    {
        *("paused", "tags", "trace_context", "rerun_of", "expires_at", "concurrency_key"),
        *("rate_key", "window_key", "started_at", "worker_id", "progress"),
    }
)
# the tables of ket's first migration: one of them missing means none is there yet; a table of a
# later migration missing means the database is at an older version than this ket
# (tests/unit/store/test_sql_failure.py keeps this list equal to migration 1's)
FIRST_TABLES = frozenset(
    {"ket_jobs", "ket_job_errors", "ket_schedules", "ket_schedule_fires", "ket_sent_messages"}
)
# SQLSTATEs of a server that cannot be reached now: connection exceptions (class 08), and an
# administrator's or a crash's shutdown, or a server that is starting or stopping (57P01-57P03)
_AWAY_STATES = ("57P01", "57P02", "57P03")


def database_error(error: Exception, engine: AsyncEngine | Engine) -> StoreError:
    """`error`, met while using `engine`, as the StoreError a caller sees."""
    if isinstance(error, StoreError):
        return error
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(error, PoolTimeout):
        message = _pool_exhausted(engine)
    elif isinstance(error, DBAPIError):
        message = f"database error: {reason(error)}"
        if unreachable(error):
            return error_kind(error)(hide_password(message, engine.url))
    elif isinstance(error, SQLAlchemyError):
        message = f"database error: {_first_line(str(error))}"
    else:
        return driver_error(error, engine.url)
    return _kind_of(message)(hide_password(message, engine.url))


def driver_error(error: Exception, url: Any) -> StoreError:
    """`error`, met on a plain driver connection (the lane) to the database at `url` (its
    password is hidden wherever the driver quoted it), as the StoreError a caller sees."""
    if isinstance(error, StoreError):
        return error
    if isinstance(error, OSError):  # asyncio's TimeoutError and lost sockets included
        message = f"database connection failed: {describe(error)}"
    elif from_database(error):
        message = f"database error: {_cured(describe(error))}"
    else:
        message = f"the store failed: {describe(error)}"
    kind = error_kind(error)
    return (_kind_of(message) if kind is StoreError else kind)(hide_password(message, url))


def _kind_of(message: str) -> type[StoreError]:
    """NotMigrated for a message that carries the cure of missing tables or columns."""
    return NotMigrated if message.endswith(MIGRATE) else StoreError


def error_kind(error: BaseException) -> type[StoreError]:
    """The StoreError class a caller sees for `error`: NoRoom when the server refused the
    connection for want of room (a warning, not a failure of ket's), StoreUnavailable when the
    database cannot be reached now, else StoreError."""
    if no_room(error):
        return NoRoom
    return StoreUnavailable if unreachable(error) else StoreError


def unreachable(error: BaseException) -> bool:
    """Whether `error` says the database cannot be reached now (worth trying again later):
    a lost socket or a timeout, a connection the driver could not make or lost, a server
    shutting down or starting; not a statement the database refused."""
    if isinstance(error, OSError):
        return True
    if getattr(error, "connection_invalidated", False):  # SQLAlchemy saw a disconnect
        return True
    driver = getattr(error, "orig", None) if _is_sqlalchemy_error(error) else error
    if driver is None or type(driver).__module__.split(".")[0] != "psycopg":
        return False
    state = getattr(driver, "sqlstate", None)
    if state is not None:
        return bool(state.startswith("08") or state in _AWAY_STATES)
    # psycopg's OperationalError with no SQLSTATE: the connection could not be made, or broke
    return type(driver).__name__ == "OperationalError"


def from_database(error: BaseException) -> bool:
    """Whether `error` came from SQLAlchemy or a database driver (not from a caller's code)."""
    return _is_sqlalchemy_error(error) or type(error).__module__.split(".")[0] in _DRIVERS


def _is_sqlalchemy_error(error: BaseException) -> bool:
    # no SQLAlchemy error can exist in a process that never imported it (a lean worker)
    if "sqlalchemy.exc" not in sys.modules:
        return False
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(error, SQLAlchemyError)


def locked(error: Exception) -> bool:
    """SQLite met a write lock it could not take within its busy timeout: worth retrying."""
    from sqlalchemy.exc import OperationalError

    if not isinstance(error, OperationalError):
        return False
    text = str(error.orig).lower()
    return "database is locked" in text or "database is busy" in text


def reason(error: DBAPIError) -> str:
    """The driver's first line, with the cure when ket's tables are missing."""
    return _cured(_first_line(str(error.orig)) if error.orig else _first_line(str(error)))


MIGRATE = "run `ket migrate`"  # the cure a message ends with when ket's schema is behind


def _cured(text: str) -> str:
    """`text`, with the cure when it says that ket's tables, or a column a later migration
    gives them, are missing."""
    column = _MISSING_COLUMN.search(text)
    if column is not None and (column[1] or column[2] or column[3]) in LATER_COLUMNS:
        return f"{text}: this database's ket tables are older than this version of ket; {MIGRATE}"
    if any(m in text for m in _MISSING_TABLE) and (
        "no such table" in text or "does not exist" in text
    ):
        found = _MISSING_NAME.search(text)
        if found is not None and found[1] not in FIRST_TABLES:
            return (
                f"{text}: this database's ket tables are older than this version of ket; {MIGRATE}"
            )
        return f"{text}: this database has no ket tables yet; {MIGRATE}"
    return text


def hide_password(message: str, url: Any) -> str:
    """`message` with the URL's password, wherever a driver quoted it, replaced by ***."""
    password = url.password
    if password:
        return message.replace(str(password), "***")
    return message


def _pool_exhausted(engine: AsyncEngine | Engine) -> str:
    from sqlalchemy.pool import QueuePool

    pool = engine.pool
    advice = "every connection is in use; hold them for less time, or raise pool_size"
    if not isinstance(pool, QueuePool):  # only a queue pool makes callers wait for a connection
        return f"no database connection free: {advice}"
    # the overflow allowed is private in SQLAlchemy; without it the message names the base size
    limit = pool.size() + max(int(getattr(pool, "_max_overflow", 0)), 0)
    return f"no database connection free within {pool.timeout():g} s (pool of {limit}): {advice}"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    # SQLAlchemy appends "(Background on this error at: https://sqlalche.me/...)"
    first = lines[0] if lines else ""
    return first.split(" (Background on this error at:")[0]
