"""Job stats (`ket jobs stats`, the gauges of `ket worker --metrics-port`): counts by state and
queue, the oldest lease and available ages (overall and per queue), and on PostgreSQL the jobs
table's health.

They run as the lane's other statements do, from ahead-of-time text, so a worker that reads them
for its metrics loads no SQLAlchemy (about 0.5 s of CPU and 24 MB) for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from ket.store.sql import statement as stmt
from ket.store.sql.fetch import Rows
from ket.store.sql.limit import held_back
from ket.store.sql.vacuum import table_health
from ket.store.types import DISCARDED_WITHIN, ClaimLimits, JobStats, QueueAges


async def job_stats(
    rows: Rows,
    now: datetime | None,
    long_after: float,
    limits: Mapping[str, ClaimLimits] | None = None,
) -> JobStats:
    """The stats of the tenant database `rows` reads; transactions open longer than
    `long_after` seconds are named (PostgreSQL); with the queues' `limits`, the due jobs each
    holds back."""
    counts = await rows.rows(stmt.COUNTS)
    [oldest] = await rows.rows(stmt.OLDEST, {"now": now})
    per_queue = await rows.rows(stmt.QUEUE_AGES, {"now": oldest.now})
    expired = await rows.rows(stmt.EXPIRED)
    at = instant(oldest.now)
    recent = await rows.rows(stmt.DISCARDED_RECENT, {"p_since": at - DISCARDED_WITHIN})

    def age(value: Any) -> float | None:
        return None if value is None else (at - instant(value)).total_seconds()

    stats = JobStats(
        counts={(row.state, row.queue): row[2] for row in counts},
        oldest_lease_age=age(oldest.lease),
        oldest_available_age=age(oldest.due),
        queue_ages={
            row.queue: QueueAges(oldest_lease_age=age(row.lease), oldest_available_age=age(row.due))
            for row in sorted(per_queue, key=lambda row: row.queue)
        },
        expired={row[0]: row[1] for row in sorted(expired)},
        discarded_last_hour={row[0]: row[1] for row in sorted(recent)},
        limited=await held_back(rows, limits, at) if limits else {},
    )
    if rows.dialect != "postgresql":  # SQLite rewrites rows in place: nothing to tell
        return stats
    dead, live, long = await table_health(rows, long_after)
    return replace(stats, dead_rows=dead, live_rows=live, long_transactions=long)


def instant(value: Any) -> datetime:
    """An instant the database handed back: scalar subqueries and computed columns lose the
    column type, so SQLite hands back raw microseconds (stats here, the minute counts)."""
    if isinstance(value, int):
        from ket.store.sql.column import from_micros  # SQLite: SQLAlchemy is loaded anyway

        return from_micros(value)
    result: datetime = value
    return result
