"""BulkStore: count and apply a retry or cancel to the jobs a filter matches, a batch at a
time (statements in ket.store.sql.bulk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ket.errors import StoreError
from ket.store import validate
from ket.store.sql import bulk, command
from ket.store.sql.fetch import EngineRows
from ket.store.types import BulkApplied, BulkBatch, BulkCount, JobFilter

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.capabilities.session import SqlSession

_KEY_RACES = 3  # times a bulk batch runs when a racing insert takes a unique key it retries


class SqlBulk(SqlSession):
    """Bulk retry and cancel."""

    async def job_bulk_count(self, job_filter: JobFilter, sample: int = 10) -> BulkCount:
        """How many jobs the filter matches now, and the first `sample` of them (bulk.py)."""
        states = validate.check_filter(job_filter)
        validate.check_count("bulk sample", sample, minimum=0)
        return await self._transact(lambda conn: bulk.count(conn, job_filter, states, sample))

    async def job_bulk_apply(self, batch: BulkBatch) -> BulkApplied:
        """Lock up to `batch.limit` matching jobs and retry or cancel them (bulk.py)."""
        states = validate.check_bulk_batch(batch)
        now = self._now()

        async def body(conn: AsyncConnection) -> tuple[BulkApplied, set[str]]:
            applied, queues = await bulk.apply(conn, now, batch.filter, states, batch.limit)
            await command.wake(EngineRows(conn), queues)
            return applied, queues

        for attempt in range(_KEY_RACES):
            try:
                applied, queues = await self._transact(body)
                break
            except StoreError as error:
                from sqlalchemy.exc import IntegrityError

                # an insert took a retried job's unique key meanwhile: the batch runs again,
                # and this time sees the key's holder
                if attempt == _KEY_RACES - 1 or not isinstance(error.__cause__, IntegrityError):
                    raise
        self._available(queues)
        return applied
