"""Paused queues in SQL (ket_queue_pauses): pause, resume, list. Statements built once per
dialect, like session.py's; operator paths, run on the engine. The claim statements read the
table themselves (query.py: a paused queue has nothing to claim and nothing due).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.fetch import fetch_all
from ket.store.sql.now import TimeSql, time_params
from ket.store.sql.schema import queue_pauses
from ket.store.types import QueuePause


@dataclass(frozen=True)
class QueueStatements:
    """The queue statements of one dialect (parameters `p_*` and the time ones)."""

    pause: Any
    resume: Any
    listing: Any


@cache
def statements(dialect: str) -> QueueStatements:
    """The cached queue statements of `dialect`."""
    time = TimeSql(dialect)
    table = queue_pauses
    queue = bindparam("p_queue", type_=table.c.queue.type)
    # INSERT ... SELECT ... WHERE NOT EXISTS: a pause of a paused queue keeps its first row
    # (who paused it, and when) and says it changed nothing
    absent = ~select(table.c.queue).where(table.c.queue == queue).exists()
    paused = (
        table.insert()
        .from_select(
            ["queue", "paused_at", "paused_by"],
            select(
                queue,
                time.now(),
                bindparam("p_paused_by", type_=table.c.paused_by.type),
            ).where(absent),
        )
        .returning(table.c.queue)
    )
    return QueueStatements(
        pause=paused,
        resume=delete(table).where(table.c.queue == queue).returning(table.c.queue),
        listing=select(table.c.queue, table.c.paused_at, table.c.paused_by).order_by(table.c.queue),
    )


async def pause(
    connection: AsyncConnection, queue: str, paused_by: str, now: datetime | None
) -> bool:
    """Pause `queue`; True when it was not paused."""
    made = statements(connection.dialect.name)
    params = {**time_params(now), "p_queue": queue, "p_paused_by": paused_by}
    # the rows the statement returns, not its rowcount: the driver's count of an INSERT ...
    # SELECT that inserted nothing read 1 through SQLAlchemy's asyncio adapter on PostgreSQL
    return bool(await fetch_all(connection, made.pause, params))


async def resume(connection: AsyncConnection, queue: str) -> bool:
    """Resume `queue`; True when it was paused."""
    made = statements(connection.dialect.name)
    return bool(await fetch_all(connection, made.resume, {"p_queue": queue}))


async def pauses(connection: AsyncConnection) -> dict[str, QueuePause]:
    """The paused queues, by name."""
    rows = await fetch_all(connection, statements(connection.dialect.name).listing)
    return {
        row.queue: QueuePause(queue=row.queue, paused_at=row.paused_at, paused_by=row.paused_by)
        for row in rows
    }
