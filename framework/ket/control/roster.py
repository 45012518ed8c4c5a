"""The worker roster (`ket.store.roster`) in a SQL control database.

On PostgreSQL each call takes a connection of its own and closes it (a report comes every few
seconds; a connection the server dropped can then never fail the next one) and runs the
statements' generated text with psycopg alone, like the lane: a worker reports itself without
importing SQLAlchemy. SQLite, embedded, keeps a small engine for the roster's life.

The schema (control_migration.py) is installed or upgraded by the first report of each roster;
reading a control database where no worker ever reported lists no one and creates nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ket.connection import budget
from ket.connection.address import connect_args, parse_url, psycopg_params
from ket.connection.database_file import sqlite_file_missing
from ket.connection.database_url import shown_url
from ket.control.migration import CONTROL_LATEST, migrate_control
from ket.errors import StoreError
from ket.store.failure import describe
from ket.store.roster import FORGET_AFTER_SECONDS, SeenWorker, WorkerInfo
from ket.store.sql import statement as stmt
from ket.store.sql.failure import hide_password
from ket.store.sql.fetch import Rows
from ket.store.sql.now import time_params

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")
Body = Callable[[Rows, Callable[[str], Awaitable[None]]], Awaitable[T]]


class SqlRoster:
    """The `ket_workers` table of one control database (PostgreSQL or a SQLite file)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._parsed = parse_url(url)
        self.dialect = "sqlite" if self._parsed.get_backend_name() == "sqlite" else "postgresql"
        self._engine: AsyncEngine | None = None
        self._migrated = False

    async def worker_report(
        self, info: WorkerInfo, *, forget_after_seconds: float = FORGET_AFTER_SECONDS
    ) -> list[SeenWorker]:
        """Record `info` as seen now, forget rows long gone, return every row."""

        async def report(rows: Rows, ddl: Callable[[str], Awaitable[None]]) -> list[Any]:
            now = self._now()
            if not self._migrated:
                await migrate_control(rows, ddl, now)
            await rows.rows(stmt.WORKER_REPORT, {**_params(info), "now": now})
            await rows.rows(stmt.WORKER_FORGET, time_params(now, forget=-forget_after_seconds))
            return await rows.rows(stmt.WORKER_LIST, {"now": now})

        found = await self._run(report)
        self._migrated = True
        return [_seen(row) for row in found]

    async def worker_list(self) -> list[SeenWorker]:
        """Every row, oldest first (none where the roster's table does not exist)."""
        if sqlite_file_missing(self.url):  # a reader makes no database: none, no workers
            return []

        async def listing(rows: Rows, ddl: Callable[[str], Awaitable[None]]) -> list[Any]:
            if not await rows.rows(stmt.WORKER_TABLE):
                return []
            return await rows.rows(stmt.WORKER_LIST, {"now": self._now()})

        return [_seen(row) for row in await self._run(listing)]

    async def worker_remove(self, worker_id: str) -> bool:
        """Delete the row of `worker_id`; False if there was none (or no table)."""
        if sqlite_file_missing(self.url):
            return False

        async def remove(rows: Rows, ddl: Callable[[str], Awaitable[None]]) -> bool:
            if not await rows.rows(stmt.WORKER_TABLE):
                return False
            return bool(await rows.rows(stmt.WORKER_REMOVE, {"w_id": worker_id}))

        return await self._run(remove)

    async def close(self) -> None:
        """Dispose of SQLite's engine (PostgreSQL holds no connection between calls)."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    # -- connections ------------------------------------------------------------------------

    def _now(self) -> datetime | None:
        """The time parameter: None on PostgreSQL (its own clock), Python's on SQLite."""
        return None if self.dialect == "postgresql" else datetime.now(UTC)

    async def _run(self, body: Body[T]) -> T:
        try:
            if self.dialect == "postgresql":
                return await self._on_postgres(body)
            return await self._on_sqlite(body)
        except StoreError:
            raise
        except Exception as error:  # the driver's: named with the database, never the password
            message = f"control database {shown_url(self.url)!r}: {describe(error)}"
            raise StoreError(hide_password(message, self._parsed)) from error

    async def _on_postgres(self, body: Body[T]) -> T:
        import psycopg

        from ket.connection.goodbye import close_quietly
        from ket.store.sql.lane import LaneConnection

        params = psycopg_params(self._parsed)
        options = {k: v for k, v in connect_args().items() if k not in params}
        # urgent, as a heartbeat is: a worker's report keeps its tenants as a heartbeat keeps a
        # lease. Behind the herd of a thousand tenants starting (or taken over), it came late
        # enough for the peers to take this worker for gone and share its tenants out, and
        # back again at its next report.
        with budget.urgent():
            raw = await budget.connect(
                lambda: psycopg.AsyncConnection.connect(autocommit=True, **params, **options),
                kind="other",
                url=self._parsed,
            )
        try:
            await raw.execute("SET TIME ZONE 'UTC'")
            async with raw.transaction():

                async def ddl(text: str) -> None:
                    await raw.execute(text)  # our own constant DDL: no parameters

                return await body(LaneConnection(raw), ddl)
        finally:
            await close_quietly(raw)  # counted until its server process is gone

    async def _on_sqlite(self, body: Body[T]) -> T:
        from ket.connection.database_file import ensure_sqlite_folder
        from ket.connection.engine import create_engine
        from ket.store.sql.fetch import EngineRows

        if self._engine is None:
            ensure_sqlite_folder(self.url)
            self._engine = create_engine(self.url, pool_size=1)
        async with self._engine.begin() as connection:

            async def ddl(text: str) -> None:
                await connection.exec_driver_sql(text)

            return await body(EngineRows(connection), ddl)


def _params(info: WorkerInfo) -> dict[str, Any]:
    return {
        "w_id": info.id,
        "w_host": info.host,
        "w_pid": info.pid,
        "w_started_at": info.started_at,
        "w_tenants": json.dumps("all" if info.tenants is None else list(info.tenants)),
        "w_queues": json.dumps(dict(info.queues), sort_keys=True),
        "w_version": info.version,
        "w_manifest_hash": info.manifest_hash,
        "w_interval_s": float(info.interval_seconds),
    }


def _seen(row: Any) -> SeenWorker:
    tenants = _json(row.tenants, "all")
    queues = _json(row.queues, {})
    info = WorkerInfo(
        id=row.id,
        host=row.host,
        pid=row.pid,
        started_at=_utc(row.started_at),
        tenants=tuple(str(t) for t in tenants) if isinstance(tenants, list) else None,
        queues={str(k): int(v) for k, v in queues.items()} if isinstance(queues, dict) else {},
        version=row.version,
        manifest_hash=row.manifest_hash,
        interval_seconds=float(row.interval_s),
    )
    seen = _utc(row.last_seen_at)
    ago = max(0.0, (_utc(row.now) - seen).total_seconds())
    return SeenWorker(info=info, last_seen_at=seen, seen_seconds_ago=ago)


def _json(text: str, default: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):  # a row written by hand: shown as its default
        return default


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


__all__ = ["CONTROL_LATEST", "SqlRoster"]
