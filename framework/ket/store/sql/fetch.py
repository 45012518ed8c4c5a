"""Running statements and taking their rows, on an engine connection or a lane connection.

`Rows` is what the store's hot operations are written against, once: `EngineRows` runs them on a
SQLAlchemy connection (SQLite, and a caller's own connection), `lane.LaneConnection` on a plain
psycopg connection (PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection


class Rows(Protocol):
    """A connection that runs the store's statements (inside whatever transaction it is in)."""

    async def rows(self, statement: Any, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns; fields by name."""
        ...

    async def tuples(self, statement: Any, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns; fields by position (by name too where cheap)."""
        ...

    async def many(self, statement: Any, params: Sequence[dict[str, Any]]) -> list[Any]:
        """The statement once per parameter set; the rows of each, in order."""
        ...


class EngineRows:
    """`Rows` on a SQLAlchemy async connection."""

    def __init__(self, connection: AsyncConnection) -> None:
        self.connection = connection

    async def rows(self, statement: Any, params: dict[str, Any] | None = None) -> list[Any]:
        return await fetch_all(self.connection, statement, params)

    tuples = rows

    async def many(self, statement: Any, params: Sequence[dict[str, Any]]) -> list[Any]:
        result = await self.connection.execute(statement, list(params))
        return list(result.all()) if result.returns_rows else []


async def fetch_all(
    connection: AsyncConnection, statement: Any, params: dict[str, Any] | None = None
) -> list[Any]:
    """Every row the statement returns."""
    return list((await connection.execute(statement, params)).all())


async def fetch_one(
    connection: AsyncConnection, statement: Any, params: dict[str, Any] | None = None
) -> Any:
    """The first row the statement returns, or None."""
    return (await connection.execute(statement, params)).first()
