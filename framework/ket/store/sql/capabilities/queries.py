"""QueryableStore: one job in full, a page of jobs, and the stats (statements in
ket.store.sql.query and ket.store.sql.stats).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ket.store import validate
from ket.store.sql import stats
from ket.store.sql.fetch import fetch_all
from ket.store.types import ClaimLimits, JobId, JobQuery, JobRecord, JobStats

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.capabilities.session import SqlSession

# `ket jobs stats` names the transactions open on the tenant database for longer than this
LONG_TRANSACTION_SECONDS = 60.0


class SqlQueries(SqlSession):
    """Read access for tools, tests and the dashboard."""

    async def job_get(self, job_id: JobId) -> JobRecord | None:
        """One job in full, with its error history."""
        validate.check_job_id(job_id)
        from sqlalchemy import select

        from ket.store.sql.schema import jobs

        records = await self._records(select(jobs).where(jobs.c.id == job_id), result=True)
        return records[0] if records else None

    async def job_list(self, job_query: JobQuery) -> list[JobRecord]:
        """Jobs matching the query, newest first."""
        validate.check_query(job_query)
        from ket.store.sql import query

        return await self._records(query.listing(self.dialect, job_query))

    async def _records(self, statement: Any, *, result: bool = False) -> list[JobRecord]:
        """The jobs `statement` selects, with their errors (and, with `result`, their
        results)."""
        from ket.store.sql import query

        async def body(conn: AsyncConnection) -> list[JobRecord]:
            rows = await fetch_all(conn, statement)
            ids = [row.id for row in rows]
            history = await fetch_all(conn, query.errors_of(ids)) if rows else []
            found = query.job_records(rows, history)
            if result and ids:
                kept = dict(await fetch_all(conn, query.results_of(ids)))
                found = [replace(job, result=kept.get(job.id)) for job in found]
            return found

        return await self._transact(body)

    async def job_stats(
        self,
        limits: Mapping[str, ClaimLimits] | None = None,
        *,
        long_after: float = LONG_TRANSACTION_SECONDS,
    ) -> JobStats:
        """Counts by state and queue; oldest lease age and oldest available age; on PostgreSQL
        the jobs table's dead rows and the transactions open longer than `long_after` s (on the
        lane: a worker reading them for its metrics loads no SQLAlchemy); with the queues'
        fleet-wide `limits`, the due jobs each holds back."""
        now = self._now()
        return await self._hot(
            lambda rows: stats.job_stats(rows, now, long_after, limits), lasting=True
        )
