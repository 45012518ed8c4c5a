"""RecordStore: the application's model rows behind `ctx.db` (statements in
ket.store.sql.records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ket.store.sql.fetch import Rows
from ket.store.sql.lane import LaneConnection
from ket.store.types import ModelTable, Where

if TYPE_CHECKING:
    from ket.store.record import RecordModel
    from ket.store.sql.records import SqlRecords
from ket.store.sql.capabilities.session import SqlSession


class SqlRecordStore(SqlSession):
    """The app's model rows."""

    @cached_property
    def _rows(self) -> SqlRecords:
        from ket.store.sql.records import SqlRecords

        return SqlRecords(self.dialect)

    async def record_install(self, models: Sequence[ModelTable]) -> None:
        """Create missing model tables and add missing columns; never drops anything."""
        from ket.store.sql.records import install

        checked = self._rows.prepare_install(models)
        # on PostgreSQL, one question on the lane first: the tables are there (`ket migrate`
        # made them, or the last start) and nothing is to be done, most of the time
        if self._lane is None or not await self._hot(
            lambda conn: _models_complete(conn, checked), single=True
        ):
            await self._transact(lambda conn: conn.run_sync(install, checked))
        self._rows.installed(checked)

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; returns its new id."""
        return await self._transact(self._rows.insert(model, values).run, single=True)

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id, or None."""
        return await self._transact(self._rows.get(model, record_id).run, single=True)

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where`, oldest first, at most `limit`."""
        call = self._rows.select(model, where, limit)
        return await self._transact(call.run, single=True)

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the rows matching `where`; how many rows matched."""
        call = self._rows.update(model, where, values)
        return await self._transact(call.run, single=True)

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the rows matching `where`; how many."""
        return await self._transact(self._rows.delete(model, where).run, single=True)


async def _models_complete(connection: Rows, models: Sequence[RecordModel]) -> bool:
    """Whether the models' tables have every column already (on the lane's connection)."""
    from ket.store.sql.records import PRESENT_COLUMNS, complete

    assert isinstance(connection, LaneConnection)
    tables = [model.table for model in models]
    async with connection.raw.cursor() as cursor:
        await cursor.execute(PRESENT_COLUMNS, {"tables": tables})
        return complete(models, await cursor.fetchall())
