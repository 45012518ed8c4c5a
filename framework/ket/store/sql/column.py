"""Column types that mean the same on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Dialect, Integer
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.types import TypeDecorator, TypeEngine

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# SQLite only auto-numbers an INTEGER PRIMARY KEY (the rowid); PostgreSQL gets a bigint identity.
Id = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON().with_variant(JSONB(), "postgresql")


def to_micros(instant: datetime) -> int:
    """Whole microseconds since the Unix epoch (exact: no float rounding)."""
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


class Instant(TypeDecorator[datetime]):
    """An aware UTC instant: `timestamptz` on PostgreSQL, integer microseconds on SQLite.

    Integers keep SQLite comparisons and ordering exact and cheap; text timestamps would sort
    wrongly the moment two offsets met.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return dialect.type_descriptor(BigInteger())
        return dialect.type_descriptor(DateTime(timezone=True))

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.utcoffset() is None:
            raise ValueError(f"instants must be timezone-aware, got {value!r}")
        return to_micros(value) if dialect.name == "sqlite" else value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if dialect.name == "sqlite":
            return from_micros(int(value))
        result: datetime = value
        return result.astimezone(UTC)
