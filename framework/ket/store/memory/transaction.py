"""A memory transaction: writes apply at once and are undone again on rollback."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ket.errors import StoreError
from ket.store.memory.database import MemoryDatabase
from ket.store.memory.records import MemoryRecords
from ket.store.types import Inserted, JobId, NewJob, Where

# Inserts validated jobs, a debounced job's undo kept in the list given; returns their results
# and the queues that got work due now.
Insert = Callable[[Sequence[NewJob], list[Callable[[], None]]], tuple[list[Inserted], set[str]]]


class MemoryTransaction:
    """An open transaction of a MemoryStore (no isolation: see MemoryStore)."""

    def __init__(self, database: MemoryDatabase, insert: Insert, records: MemoryRecords) -> None:
        self._database = database
        self._insert = insert
        self._records = records
        self._inserted: list[JobId] = []
        self._undo: list[Callable[[], None]] = []  # what puts back the jobs a debounce changed
        self._queues: set[str] = set()
        self._open = True

    @property
    def connection(self) -> None:
        """The memory store has no connection to share."""
        return None

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs that stay only if the transaction commits."""
        if not self._open:
            raise StoreError("transaction is closed")
        inserted, queues = self._insert(jobs, self._undo)
        self._inserted.extend(result.id for result in inserted if not result.coalesced)
        self._queues |= queues
        return inserted

    def commit(self) -> None:
        """Keep the inserted jobs and send their wake-ups."""
        self._open = False
        self._database.wakeups.notify(self._queues)

    def rollback(self) -> None:
        """Delete the jobs this transaction inserted (ids are not reused); undo its row changes."""
        self._open = False
        with self._database.lock:
            self._database.delete(self._inserted)
            for undo in reversed(self._undo):
                undo()
            self._records.rollback()

    # -- model rows: applied at once, undone on rollback ------------------------------------

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row that stays only if the transaction commits; its id."""
        return await self._open_records().record_insert(model, values)

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id, or None."""
        return await self._open_records().record_get(model, record_id)

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where`, oldest first, at most `limit`."""
        return await self._open_records().record_select(model, where, limit)

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the matching rows until a rollback; how many matched."""
        return await self._open_records().record_update(model, where, values)

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the matching rows until a rollback; how many."""
        return await self._open_records().record_delete(model, where)

    def _open_records(self) -> MemoryRecords:
        if not self._open:
            raise StoreError("transaction is closed")
        return self._records
