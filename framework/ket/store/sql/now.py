"""The store's "now" inside one operation, as SQL: the database's clock or a given instant."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Interval, bindparam, func, type_coerce

from ket.store.sql.column import Instant


@dataclass(frozen=True, slots=True)
class Now:
    """`value` None means the database's `now()` (PostgreSQL); else that instant, bound."""

    value: datetime | None

    def expr(self) -> ColumnElement[Any]:
        """Now, as a SQL expression of type Instant."""
        if self.value is None:
            return type_coerce(func.now(), Instant)
        return bindparam(None, self.value, type_=Instant)

    def plus(self, seconds: float) -> ColumnElement[Any]:
        """Now + seconds (negative: earlier), as a SQL expression of type Instant."""
        step = timedelta(seconds=seconds)
        if self.value is None:
            return type_coerce(func.now() + bindparam(None, step, type_=Interval), Instant)
        return bindparam(None, self.value + step, type_=Instant)
