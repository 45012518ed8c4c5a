"""MinuteStore: the per-minute counts behind the dashboard's charts (ket.store.sql.minute)."""

from __future__ import annotations

from datetime import timedelta

from ket.store import validate
from ket.store.sql import minute
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.fetch import EngineRows
from ket.store.types import JobMinutes, MinuteQuery


class SqlMinutes(SqlSession):
    """Jobs per minute and queue."""

    async def minute_record(self, every: float) -> bool:
        """Count since the last count, if that was `every` seconds ago or more (minute.py)."""
        validate.check_seconds("every", every, positive=False)
        now = self._now()
        return await self._hot(lambda rows: minute.record(rows, now, every))

    async def minute_list(self, query: MinuteQuery) -> JobMinutes:
        """The per-minute counts `query` asks for, and how far the counts have come."""
        validate.check_minute_query(query)
        until = query.until or await self.now() + timedelta(minutes=1)
        return await self._transact(
            lambda conn: minute.listing(EngineRows(conn), query.since, until)
        )
