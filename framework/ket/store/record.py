"""Model rows: what every store accepts for a model table, checked the same way everywhere.

A `RecordModel` is a `ModelTable` whose names and shorthand types were checked. It validates the
values of an insert, an update and a filter (pydantic, lax as for job input) before a store
writes anything, so every store refuses the same things with the same words. Unknown model and
field names never reach SQL: a store only builds statements from a RecordModel's names.
"""

from __future__ import annotations

import copy
import datetime as dt
import functools
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AwareDatetime, Field, JsonValue, TypeAdapter, ValidationError

from ket.errors import RecordRejected, StoreError
from ket.store.types import ModelTable, Where

# The input shorthand of ket.declare.input.SHORTHAND_TYPES, restated: the store may not import
# the declarations (tests/unit/test_layering.py), and a unit test keeps the two in step.
FIELD_TYPES: Mapping[str, Any] = {
    "id": Annotated[str, Field(min_length=1)],
    "string": str,
    "int": int,
    "number": float,
    "bool": bool,
    "datetime": AwareDatetime,
    "date": dt.date,
    "json": JsonValue,
}
MODEL_NAME = re.compile(r"([a-z][a-z0-9_]*)\.([A-Za-z][A-Za-z0-9_]*)")
FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# PostgreSQL cuts longer identifiers silently, which could make two tables one.
MAX_TABLE_NAME = 63
MAX_BIGINT = 2**63 - 1  # an `int` field is a BIGINT column


def new_id() -> str:
    """A fresh row id: 32 hex digits, unguessable and never repeated in practice."""
    return uuid.uuid4().hex


def table_name(model: str) -> str:
    """`sales.Order` -> `m_sales_order`."""
    module, _, name = model.partition(".")
    return f"m_{module}_{name}".lower()


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """One declared field: its name, shorthand type and whether it may be None."""

    name: str
    type: str
    optional: bool


@dataclass(frozen=True, kw_only=True)
class RecordModel:
    """A checked model table: its name, table name, fields, and their validators."""

    name: str
    table: str
    columns: tuple[Column, ...]
    _adapters: Mapping[str, TypeAdapter[Any]] = field(compare=False, repr=False)

    @classmethod
    def of(cls, model: ModelTable) -> RecordModel:
        """Check a ModelTable's names and types; StoreError names the first bad one."""
        if not isinstance(model.name, str) or not MODEL_NAME.fullmatch(model.name):
            raise StoreError(f"model name must be <module>.<Model>, got {model.name!r}")
        table = table_name(model.name)
        if len(table) > MAX_TABLE_NAME:
            raise StoreError(
                f"model {model.name!r}: table name {table!r} is longer than "
                f"{MAX_TABLE_NAME} characters"
            )
        columns = tuple(_column(model.name, name, spec) for name, spec in model.fields.items())
        folded = [c.name.lower() for c in columns]
        if len(set(folded)) != len(folded):  # SQL column names ignore case
            raise StoreError(f"model {model.name!r} has fields that differ only in case")
        adapters = {"id": _adapter("id", False)}
        for column in columns:
            adapters[column.name] = _adapter(column.type, column.optional)
        return cls(name=model.name, table=table, columns=columns, _adapters=adapters)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def new_row(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every field's value for an insert (an optional field left out is None)."""
        given = self._known(values, "insert")
        missing = [c.name for c in self.columns if not c.optional and c.name not in given]
        if missing:
            raise StoreError(f"{self.name}: required field {missing[0]!r} is missing")
        return {c.name: self._value(c.name, given.get(c.name)) for c in self.columns}

    def changes(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """The fields an update sets, validated."""
        given = self._known(values, "update")
        return {name: self._value(name, value) for name, value in given.items()}

    def where(self, where: Where | None) -> dict[str, Any]:
        """A filter's values by field (`id` included), validated; None matches a null field."""
        if where is None:
            return {}
        if not isinstance(where, Mapping):
            raise StoreError(
                f"{self.name}: where must be a mapping of field to value, got {where!r}"
            )
        checked: dict[str, Any] = {}
        for name, value in where.items():
            self._check_field(name, allow_id=True)
            if name != "id" and self._column(name).type == "json":
                raise StoreError(f"{self.name}.{name} is json and cannot be filtered on")
            checked[name] = None if value is None else self._value(name, value)
        return checked

    def _known(self, values: Mapping[str, Any], what: str) -> dict[str, Any]:
        if not isinstance(values, Mapping):
            raise StoreError(
                f"{self.name}: {what} values must be a mapping of field to value, got {values!r}"
            )
        for name in values:
            if name == "id":
                raise StoreError(f"{self.name}.id is generated by the store and cannot be set")
            self._check_field(name)
        return dict(values)

    def _check_field(self, name: object, *, allow_id: bool = False) -> None:
        if name == "id" and allow_id:
            return
        if not isinstance(name, str) or name not in self._adapters or name == "id":
            known = ", ".join(self.field_names) or "none"
            raise StoreError(f"{self.name} has no field {name!r} (fields: {known})")

    def _column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def _value(self, name: str, value: Any) -> Any:
        try:
            checked = self._adapters[name].validate_python(value)
        except ValidationError as error:
            problem = error.errors()[0]["msg"]
            raise RecordRejected(self.name, name, problem, value) from None
        in_json = name != "id" and self._column(name).type == "json"
        unstorable = _json(checked) if in_json else _unstorable(checked)
        if unstorable:
            raise RecordRejected(self.name, name, unstorable, value)
        if isinstance(checked, dt.datetime):
            return checked.astimezone(dt.UTC)
        # a json value is the caller's object: keep none of it, so later changes cannot leak in
        return copy.deepcopy(checked) if isinstance(checked, dict | list) else checked


@functools.lru_cache(maxsize=1024)
def _checked(name: str, fields: tuple[tuple[str, str], ...]) -> RecordModel:
    """A model checked once per process (a RecordModel is immutable): each tenant's install
    checks the same models, and a worker serving a thousand tenants of the example app held
    5,000 RecordModels, 2 MB, where 5 do."""
    return RecordModel.of(ModelTable(name=name, fields=dict(fields)))


@functools.cache
def _adapter(kind: str, optional: bool) -> TypeAdapter[Any]:
    """The validator of a field type, made once per process: each tenant's install checks the
    same models, and a TypeAdapter per tenant and column cost a worker serving a thousand
    tenants of the example app megabytes (tracemalloc: 5 MB in its first 400 tenants)."""
    python_type = FIELD_TYPES[kind]
    return TypeAdapter(python_type | None if optional else python_type)


def checked_models(models: Sequence[ModelTable]) -> list[RecordModel]:
    """RecordModels for an install, refusing two models that would share one table."""
    checked = [_checked(model.name, tuple(model.fields.items())) for model in models]
    tables: dict[str, str] = {}
    for model in checked:
        other = tables.setdefault(model.table, model.name)
        if other != model.name:
            raise StoreError(
                f"models {other!r} and {model.name!r} would share table {model.table!r}"
            )
    return checked


def check_limit(limit: object) -> None:
    """A select's limit: None, or an integer from 0 to 2**63 - 1."""
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 <= limit <= MAX_BIGINT
    ):
        raise StoreError(f"limit must be None or an integer from 0 to {MAX_BIGINT}, got {limit!r}")


def check_id(model: RecordModel, record_id: object) -> str:
    """A row id to look up: a string (without NUL: no database could hold such an id)."""
    if not isinstance(record_id, str) or _unstorable(record_id):
        raise StoreError(f"{model.name}: an id is a string of UTF-8 text, got {record_id!r}")
    return record_id


def _unstorable(value: Any) -> str | None:
    """Why no store could keep `value` as every store does (None: it can), so that the memory
    store refuses what PostgreSQL and SQLite would fail on: NUL (PostgreSQL text and JSONB
    refuse it), a lone surrogate (no UTF-8), an int past 64 bits, NaN or infinity inside JSON."""
    if isinstance(value, str):
        if "\x00" in value:
            return "text must not contain NUL characters"
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return "text must be valid UTF-8 (no lone surrogates)"
        return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if -MAX_BIGINT - 1 <= value <= MAX_BIGINT else "an int must fit 64 bits"
    if isinstance(value, dict):
        return next((p for k, v in value.items() for p in (_unstorable(k), _json(v)) if p), None)
    if isinstance(value, list):
        return next((p for item in value if (p := _json(item))), None)
    return None


def _json(value: Any) -> str | None:
    """Inside a JSON document: as `_unstorable`, and no NaN or infinity (not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "json cannot hold NaN or infinity"
    if isinstance(value, int) and not isinstance(value, bool):
        return None  # JSON numbers have no size limit
    return _unstorable(value)


def _column(model: str, name: object, spec: object) -> Column:
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        raise StoreError(
            f"model {model!r}: field name {name!r} must be an identifier starting with a letter"
        )
    if name == "id":
        raise StoreError(f"model {model!r}: field 'id' is generated by the store")
    if not isinstance(spec, str):
        raise StoreError(f"model {model!r}: field {name!r} must have a type name, got {spec!r}")
    base, optional = (spec[:-1], True) if spec.endswith("?") else (spec, False)
    if base not in FIELD_TYPES:
        known = ", ".join(FIELD_TYPES)
        raise StoreError(
            f"model {model!r}: field {name!r} has unknown type {spec!r}; known types: {known}"
        )
    return Column(name=name, type=base, optional=optional)
