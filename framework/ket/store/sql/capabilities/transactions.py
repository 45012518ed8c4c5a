"""TransactionalStore: a transaction for the caller's statements, job inserts and model rows,
whose jobs wake their queues once it commits.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ket.errors import StoreError
from ket.store import validate
from ket.store.failure import translated
from ket.store.sql.failure import from_database
from ket.store.sql.fetch import EngineRows
from ket.store.sql.insert import insert_plan, run_plan
from ket.store.types import Inserted, NewJob, Where

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from ket.store.sql.records import RecordCall
from ket.store.sql.capabilities.records import SqlRecordStore

T = TypeVar("T")


class SqlTransactions(SqlRecordStore):
    """Transactions for `ctx.tx`."""

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlTransaction]:
        """A transaction for the caller's statements and job inserts; wake-ups after commit.

        Failing to begin, commit or roll back raises StoreError, and so does a database error
        raised in the block (its transaction is lost); the block's other exceptions pass as
        they are.
        """
        if self._closed:
            raise StoreError("the store is closed")
        tx = SqlTransaction(self)
        in_block = False
        try:
            async with self.engine.begin() as connection:
                tx.connection = connection
                in_block = True
                yield tx
                in_block = False
        except StoreError:
            raise
        except Exception as error:
            if in_block and not from_database(error):
                raise
            raise self._failure(error) from error
        finally:
            tx.connection = None
        for batch, now in tx.pending:
            self._woken(batch, now)


class SqlTransaction:
    """An open transaction of a SqlStore: `connection` for the caller's own statements."""

    def __init__(self, store: SqlTransactions) -> None:
        self._store = store
        self.connection: AsyncConnection | None = None
        self.pending: list[tuple[Sequence[NewJob], datetime | None]] = []

    async def job_insert(self, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in this transaction: they exist if and only if it commits."""
        if self.connection is None:
            raise StoreError("the transaction is over")
        payloads = validate.encode_payloads(batch)
        if not batch:
            return []
        now = self._store._now()
        plan = insert_plan(self._store.dialect, now, batch, payloads)
        with translated(self._store._failure):
            inserted = await run_plan(EngineRows(self.connection), plan)
        self.pending.append((batch, now))
        return inserted

    # -- model rows, on this transaction's connection ---------------------------------------

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row that exists if and only if the transaction commits; its id."""
        return await self._run(self._store._rows.insert(model, values))

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id as this transaction sees it, or None."""
        return await self._run(self._store._rows.get(model, record_id))

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where` as this transaction sees them, oldest first."""
        return await self._run(self._store._rows.select(model, where, limit))

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the matching rows, in this transaction; how many matched."""
        return await self._run(self._store._rows.update(model, where, values))

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the matching rows, in this transaction; how many."""
        return await self._run(self._store._rows.delete(model, where))

    async def _run(self, call: RecordCall[T]) -> T:
        # no lock retry here: the transaction already holds SQLite's write lock (BEGIN IMMEDIATE)
        if self.connection is None:
            raise StoreError("the transaction is over")
        with translated(self._store._failure):
            return await call.run(self.connection)
