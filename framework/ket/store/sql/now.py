"""The store's "now" in SQL: the database's clock, or an instant passed as a parameter.

Statements are built once per dialect and reused (SQLAlchemy then caches their compiled form and
psycopg prepares them), so time never appears in a statement as a value: it comes in as named
parameters. `now` is the operation's now, and `<name>_at` an instant `<name>_s` seconds after it.
On PostgreSQL a parameter left None falls back to the database's `now()`; SQLite, embedded in
this process, always gets the instants from Python.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ket.errors import JobRejected

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement


def time_params(now: datetime | None, **offsets: float) -> dict[str, Any]:
    """Parameters for `now` and each `<name>_at` = now + offsets[name] seconds."""
    params: dict[str, Any] = {"now": now}
    for name, seconds in offsets.items():
        params[f"{name}_s"] = float(seconds)
        params[f"{name}_at"] = None if now is None else _later(now, seconds, name)
    return params


def _later(now: datetime, seconds: float, name: str) -> datetime:
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:  # a test clock set near the end of the calendar
        raise JobRejected(
            f"{name} of {seconds!r} seconds from {now.isoformat()} leaves the calendar"
        ) from None


class TimeSql:
    """The SQL for now and now + offsets, in one dialect (statement builders only: imports
    SQLAlchemy, which `time_params` does not)."""

    def __init__(self, dialect: str) -> None:
        self.database_time = dialect == "postgresql"

    def now(self) -> ColumnElement[Any]:
        """The operation's now (parameter `now`)."""
        from sqlalchemy import bindparam, func, type_coerce

        from ket.store.sql.column import Instant

        given = bindparam("now", type_=Instant)
        if not self.database_time:
            return given
        return type_coerce(func.coalesce(given, func.now()), Instant)

    def after(self, instant: Any, seconds: Any) -> ColumnElement[Any]:
        """`instant` plus `seconds` (a float expression); NULL when either is."""
        from sqlalchemy import BigInteger, cast, literal_column, type_coerce

        from ket.store.sql.column import Instant

        if self.database_time:
            return type_coerce(instant + seconds * literal_column("interval '1 second'"), Instant)
        # SQLite's instants are integer microseconds
        return type_coerce(instant + cast(seconds * 1_000_000, BigInteger), Instant)

    def at(self, name: str) -> ColumnElement[Any]:
        """Now + `<name>_s` seconds (parameters `<name>_at` and `<name>_s`)."""
        from sqlalchemy import Float, bindparam, func, literal_column, type_coerce

        from ket.store.sql.column import Instant

        given = bindparam(f"{name}_at", type_=Instant)
        if not self.database_time:
            return given
        offset = bindparam(f"{name}_s", type_=Float) * literal_column("interval '1 second'")
        return type_coerce(func.coalesce(given, func.now() + offset), Instant)
