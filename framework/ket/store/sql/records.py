"""Model rows in SQL: one table per model, `m_<module>_<model>`, built with SQLAlchemy Core.

A table has `id` (TEXT primary key; the store generates it) and one column per field. Rows come
back oldest first: by the hidden identity column `_seq` on PostgreSQL and by the rowid on SQLite
(no field can be called `_seq`: field names start with a letter). Every statement is built once per
(dialect, table shape, kind) and cached; values always arrive as parameters, and names only ever
come from a checked RecordModel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Generic, TypeVar

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    CursorResult,
    Date,
    Executable,
    Float,
    Identity,
    MetaData,
    Table,
    Text,
    bindparam,
    delete,
    insert,
    inspect,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.schema import CreateColumn, CreateTable
from sqlalchemy.types import TypeEngine

from ket.errors import StoreError
from ket.store.record import (
    Column as Field,
)
from ket.store.record import (
    RecordModel,
    check_id,
    check_limit,
    checked_models,
    new_id,
)
from ket.store.sql.column import Instant, Json
from ket.store.types import ModelTable, Where

T = TypeVar("T")

SEQ = "_seq"
# Any constant works; it only has to be the same for every process installing model tables.
_PG_LOCK = 0x6B6572
_TYPES: Mapping[str, Callable[[], TypeEngine[Any]]] = {
    "id": Text,
    "string": Text,
    "int": BigInteger,
    "number": Float,
    "bool": Boolean,
    "datetime": Instant,
    "date": Date,
    "json": lambda: Json,
}

Shape = tuple[str, tuple[Field, ...]]  # (table name, columns): what a statement depends on
WhereKey = tuple[tuple[str, bool], ...]  # (field, compared with None) in the filter's order


@dataclass(frozen=True, slots=True)
class RecordCall(Generic[T]):
    """One prepared statement with its parameters, and how to read its result."""

    statement: Executable
    params: dict[str, Any]
    read: Callable[[CursorResult[Any]], T]

    async def run(self, connection: AsyncConnection) -> T:
        """Execute on `connection` (the caller owns its transaction)."""
        return self.read(await connection.execute(self.statement, self.params))


class SqlRecords:
    """The model tables one SqlStore handle installed, and the calls that reach their rows.

    Everything is checked (names, types, values) when a call is prepared, before any connection
    is used, so a refused call writes nothing.
    """

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self._models: dict[str, RecordModel] = {}

    def prepare_install(self, models: Sequence[ModelTable]) -> list[RecordModel]:
        """The checked models of an install (StoreError names the first bad one)."""
        return checked_models(models)

    def installed(self, models: Sequence[RecordModel]) -> None:
        """Remember models whose tables exist now (after the install committed)."""
        self._models.update((model.name, model) for model in models)

    def insert(self, model: str, values: Mapping[str, Any]) -> RecordCall[str]:
        """Insert one row under a fresh id (the call's result)."""
        checked = self._model(model)
        row = {f"v_{name}": value for name, value in checked.new_row(values).items()}
        row["v_id"] = record_id = new_id()
        statement = _statement(self.dialect, _shape(checked), "insert")
        return RecordCall(statement, row, lambda _: record_id)

    def get(self, model: str, record_id: str) -> RecordCall[dict[str, Any] | None]:
        """The row with that id, or None."""
        checked = self._model(model)
        params = {"w_id": check_id(checked, record_id)}
        return RecordCall(_statement(self.dialect, _shape(checked), "get"), params, _first)

    def select(
        self, model: str, where: Where | None, limit: int | None
    ) -> RecordCall[list[dict[str, Any]]]:
        """The rows matching `where`, oldest first, at most `limit`."""
        checked = self._model(model)
        check_limit(limit)
        filters = checked.where(where)
        statement = _statement(
            self.dialect, _shape(checked), "select", _where_key(filters), limit is not None
        )
        params = _where_params(filters)
        if limit is not None:
            params["limit"] = limit
        return RecordCall(statement, params, _all)

    def update(self, model: str, where: Where, values: Mapping[str, Any]) -> RecordCall[int]:
        """Set `values` on the rows matching `where`; how many matched."""
        checked = self._model(model)
        filters = checked.where(where)
        changes = checked.changes(values)
        if not changes:
            raise StoreError(f"{checked.name}: an update must set at least one field")
        statement = _statement(
            self.dialect, _shape(checked), "update", _where_key(filters), tuple(changes)
        )
        params = _where_params(filters) | {f"v_{k}": v for k, v in changes.items()}
        return RecordCall(statement, params, _count)

    def delete(self, model: str, where: Where) -> RecordCall[int]:
        """Delete the rows matching `where`; how many."""
        checked = self._model(model)
        filters = checked.where(where)
        statement = _statement(self.dialect, _shape(checked), "delete", _where_key(filters))
        return RecordCall(statement, _where_params(filters), _count)

    def _model(self, model: str) -> RecordModel:
        found = self._models.get(model) if isinstance(model, str) else None
        if found is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise StoreError(
                f"unknown model {model!r}: install it with record_install (installed: {known})"
            )
        return found


# The tables of the current schema and their columns, among those named: what an install would
# find, in one round trip on the store's lane. SQLAlchemy's reflection of five tables took some
# 70 ms, and its engine a connection of its own: a worker checked every tenant's tables so, one
# tenant after another, as it started them (200 tenants: a minute before the last was served).
PRESENT_COLUMNS = (
    "SELECT c.relname, a.attname FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
    "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
    "AND NOT a.attisdropped "
    "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
    "AND c.relname = ANY(%(tables)s)"
)


def complete(models: Sequence[RecordModel], present: Iterable[tuple[str, str]]) -> bool:
    """Whether every model's table is there with every column (rows of PRESENT_COLUMNS): an
    install would then change nothing."""
    found: dict[str, set[str]] = {}
    for table, column in present:
        found.setdefault(table, set()).add(column)
    return all(
        model.table in found and {f.name for f in model.columns} <= found[model.table]
        for model in models
    )


def install(connection: Connection, models: Sequence[RecordModel]) -> None:
    """Create missing tables and add missing columns (nullable); never drop or change any.

    Concurrent installs queue: on PostgreSQL behind an advisory lock, on SQLite behind the write
    lock every transaction takes.
    """
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    inspector = inspect(connection)
    for model in models:
        table = _table(dialect, _shape(model))
        if not inspector.has_table(table.name):
            connection.execute(CreateTable(table))
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for field in model.columns:
            if field.name not in present:
                _add_column(connection, table, field)


def _add_column(connection: Connection, table: Table, field: Field) -> None:
    # rows already in the table have no value for it: the new column is nullable
    column = Column(field.name, _TYPES[field.type](), nullable=True)
    Table(table.name, MetaData(), column)
    definition = CreateColumn(column).compile(dialect=connection.dialect)
    name = connection.dialect.identifier_preparer.format_table(table)
    connection.exec_driver_sql(f"ALTER TABLE {name} ADD COLUMN {definition}")


def _shape(model: RecordModel) -> Shape:
    return (model.table, model.columns)


@lru_cache(maxsize=256)
def _table(dialect: str, shape: Shape) -> Table:
    name, fields = shape
    columns: list[Column[Any]] = [Column("id", Text, primary_key=True)]
    columns += [Column(f.name, _TYPES[f.type](), nullable=f.optional) for f in fields]
    if dialect == "postgresql":
        columns.append(Column(SEQ, BigInteger, Identity(), nullable=False))
    return Table(name, MetaData(), *columns)


@lru_cache(maxsize=4096)
def _statement(dialect: str, shape: Shape, kind: str, *key: Any) -> Executable:
    """The statement of `kind` for a table shape; `key` says which filters and values it takes."""
    table = _table(dialect, shape)
    if kind == "insert":
        return insert(table).values({c.name: bindparam(f"v_{c.name}") for c in _visible(table)})
    if kind == "get":
        return select(*_visible(table)).where(table.c.id == bindparam("w_id"))
    where_key: WhereKey = key[0]
    conditions = [
        table.c[name].is_(None) if null else table.c[name] == bindparam(f"w_{name}")
        for name, null in where_key
    ]
    if kind == "select":
        order = table.c[SEQ] if dialect == "postgresql" else literal_column("rowid")
        statement = select(*_visible(table)).where(*conditions).order_by(order)
        return statement.limit(bindparam("limit")) if key[1] else statement
    if kind == "update":
        values: dict[str, Any] = {name: bindparam(f"v_{name}") for name in key[1]}
        return update(table).where(*conditions).values(values)
    if kind == "delete":
        return delete(table).where(*conditions)
    raise AssertionError(f"unknown statement kind {kind!r}")


def _visible(table: Table) -> list[Column[Any]]:
    return [column for column in table.columns if column.name != SEQ]


def _where_key(filters: Mapping[str, Any]) -> WhereKey:
    return tuple((name, value is None) for name, value in filters.items())


def _where_params(filters: Mapping[str, Any]) -> dict[str, Any]:
    return {f"w_{name}": value for name, value in filters.items() if value is not None}


def _first(result: CursorResult[Any]) -> dict[str, Any] | None:
    row = result.first()
    return None if row is None else dict(row._mapping)


def _all(result: CursorResult[Any]) -> list[dict[str, Any]]:
    return [dict(row._mapping) for row in result.all()]


def _count(result: CursorResult[Any]) -> int:
    return int(result.rowcount)
