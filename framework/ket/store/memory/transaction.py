"""A memory transaction: inserts apply at once and are deleted again on rollback."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ket.errors import StoreError
from ket.store.memory.database import MemoryDatabase
from ket.store.types import Inserted, JobId, NewJob

# Inserts validated jobs; returns their results and the queues that got work due now.
Insert = Callable[[Sequence[NewJob]], tuple[list[Inserted], set[str]]]


class MemoryTransaction:
    """An open transaction of a MemoryStore (no isolation: see MemoryStore)."""

    def __init__(self, database: MemoryDatabase, insert: Insert) -> None:
        self._database = database
        self._insert = insert
        self._inserted: list[JobId] = []
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
        inserted, queues = self._insert(jobs)
        self._inserted.extend(result.id for result in inserted if not result.coalesced)
        self._queues |= queues
        return inserted

    def commit(self) -> None:
        """Keep the inserted jobs and send their wake-ups."""
        self._open = False
        self._database.wakeups.notify(self._queues)

    def rollback(self) -> None:
        """Delete the jobs this transaction inserted; ids are not reused."""
        self._open = False
        with self._database.lock:
            self._database.delete(self._inserted)
