"""Model rows in memory: one dict of rows per model table, with the SQL store's semantics.

Rows are copied in and out, so a caller can never change a stored row behind the store's back.
A row keeps the fields it was written with; a field installed later reads as None, as a column
added to a SQL table does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ket.errors import StoreError
from ket.store.record import RecordModel, check_id, check_limit, checked_models, new_id
from ket.store.types import ModelTable, Where

if TYPE_CHECKING:
    from ket.store.memory.database import MemoryDatabase


@dataclass(slots=True)
class _Row:
    seq: int  # insertion order: rows come back oldest first, even after a rollback restores one
    values: dict[str, Any]


Undo = Callable[[], object]


class RecordTables:
    """The rows of every model table of one MemoryDatabase; callers hold the database lock."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, _Row]] = {}
        self._seq = 0

    def create(self, table: str) -> None:
        """An empty table, unless it exists."""
        self.tables.setdefault(table, {})

    def next_seq(self) -> int:
        """The next insertion number."""
        self._seq += 1
        return self._seq

    def restore(self, table: str, record_id: str, row: _Row) -> None:
        """Put a deleted row back where it was in insertion order (a rollback)."""
        rows = self.tables[table]
        rows[record_id] = row
        ordered = sorted(rows.items(), key=lambda item: item[1].seq)
        rows.clear()
        rows.update(ordered)


class MemoryRecords:
    """Model rows through one store handle: the models it installed, over the shared tables.

    Inside a transaction the same class records how to undo each change, newest last.
    """

    def __init__(
        self,
        database: MemoryDatabase,
        check_open: Callable[[], None],
        models: dict[str, RecordModel] | None = None,
        undo: list[Undo] | None = None,
    ) -> None:
        self._database = database
        self._check_open = check_open
        self._models = {} if models is None else models
        self._undo = undo

    def in_transaction(self) -> MemoryRecords:
        """The same handle's models, with an undo log for a transaction."""
        return MemoryRecords(self._database, self._check_open, self._models, [])

    def rollback(self) -> None:
        """Undo this transaction's changes, newest first; the caller holds the lock."""
        for undo in reversed(self._undo or []):
            undo()
        self._undo = []

    def install(self, models: Sequence[ModelTable]) -> None:
        """Check the models, create their tables and remember them for this handle."""
        checked = checked_models(models)
        with self._locked() as tables:
            for model in checked:
                tables.create(model.table)
        self._models.update((model.name, model) for model in checked)

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; its new id."""
        checked = self._model(model)
        row = checked.new_row(values)
        record_id = new_id()
        with self._locked() as tables:
            rows = tables.tables[checked.table]
            rows[record_id] = _Row(seq=tables.next_seq(), values=row)
            self._log(partial(rows.pop, record_id, None))
        return record_id

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id, or None."""
        checked = self._model(model)
        wanted = check_id(checked, record_id)
        with self._locked() as tables:
            row = tables.tables[checked.table].get(wanted)
            return None if row is None else _out(checked, wanted, row)

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where`, oldest first, at most `limit`."""
        checked = self._model(model)
        check_limit(limit)
        filters = checked.where(where)
        with self._locked() as tables:
            found: list[dict[str, Any]] = []
            for record_id, row in _matching(tables.tables[checked.table], filters):
                if limit is not None and len(found) >= limit:
                    break
                found.append(_out(checked, record_id, row))
            return found

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the matching rows; how many matched."""
        checked = self._model(model)
        filters = checked.where(where)
        changes = checked.changes(values)
        if not changes:
            raise StoreError(f"{checked.name}: an update must set at least one field")
        with self._locked() as tables:
            matched = list(_matching(tables.tables[checked.table], filters))
            for _, row in matched:
                before = row.values
                row.values = {**before, **copy.deepcopy(changes)}
                self._log(partial(setattr, row, "values", before))
            return len(matched)

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the matching rows; how many."""
        checked = self._model(model)
        filters = checked.where(where)
        with self._locked() as tables:
            rows = tables.tables[checked.table]
            matched = list(_matching(rows, filters))
            for record_id, row in matched:
                del rows[record_id]
                self._log(partial(tables.restore, checked.table, record_id, row))
            return len(matched)

    def _model(self, model: str) -> RecordModel:
        self._check_open()
        found = self._models.get(model) if isinstance(model, str) else None
        if found is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise StoreError(
                f"unknown model {model!r}: install it with record_install (installed: {known})"
            )
        return found

    def _log(self, undo: Undo) -> None:
        if self._undo is not None:
            self._undo.append(undo)

    def _locked(self) -> _Locked:
        self._check_open()
        return _Locked(self._database)


class _Locked:
    """`with` the database lock held, giving its record tables."""

    def __init__(self, database: MemoryDatabase) -> None:
        self._database = database

    def __enter__(self) -> RecordTables:
        self._database.lock.acquire()
        return self._database.records

    def __exit__(self, *_: object) -> None:
        self._database.lock.release()


def _matching(rows: dict[str, _Row], filters: Mapping[str, Any]) -> Iterator[tuple[str, _Row]]:
    for record_id, row in rows.items():
        values = row.values
        if all(
            (record_id if name == "id" else values.get(name)) == wanted
            for name, wanted in filters.items()
        ):
            yield record_id, row


def _out(model: RecordModel, record_id: str, row: _Row) -> dict[str, Any]:
    out: dict[str, Any] = {"id": record_id}
    for name in model.field_names:
        out[name] = copy.deepcopy(row.values.get(name))
    return out
