"""Running statements and taking their rows, on an engine connection or a lane connection.

`Rows` is what the store's operations are written against, once, naming statements by their
handles (statement.py): `EngineRows` runs them on a SQLAlchemy connection (SQLite, a caller's own
connection, the operator commands), `lane.LaneConnection` on a plain psycopg connection
(PostgreSQL), with their generated text and no SQLAlchemy. `SyncRows` is its synchronous twin,
for the one plan that also runs on an application's synchronous connection (the insert, see
app_connection.py): `ConnectionRows` on a SQLAlchemy `Connection`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ket.store.sql.statement import Statement, built

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection


class Rows(Protocol):
    """A connection that runs the store's statements (inside whatever transaction it is in)."""

    dialect: str

    async def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns (none without RETURNING); fields by name."""
        ...

    async def tuples(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns; fields by position (by name too where cheap)."""
        ...

    async def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        """The statement once per parameter set; the rows of each, in order."""
        ...


class EngineRows:
    """`Rows` on a SQLAlchemy async connection."""

    def __init__(self, connection: AsyncConnection) -> None:
        self.connection = connection
        self.dialect: str = connection.dialect.name

    async def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        result = await self.connection.execute(built(statement, self.dialect), params)
        return list(result.all()) if result.returns_rows else []

    tuples = rows

    async def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        result = await self.connection.execute(built(statement, self.dialect), list(params))
        return list(result.all()) if result.returns_rows else []


class SyncRows(Protocol):
    """`Rows` on a synchronous connection (an application's own, inside its transaction)."""

    dialect: str

    def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row the statement returns (none without RETURNING)."""
        ...

    def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        """The statement once per parameter set; the rows of each, in order."""
        ...


class ConnectionRows:
    """`SyncRows` on a synchronous SQLAlchemy connection."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.dialect: str = connection.dialect.name

    def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        result = self.connection.execute(built(statement, self.dialect), params)
        return list(result.all()) if result.returns_rows else []

    def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        result = self.connection.execute(built(statement, self.dialect), list(params))
        return list(result.all()) if result.returns_rows else []


async def fetch_all(
    connection: AsyncConnection, statement: Any, params: dict[str, Any] | None = None
) -> list[Any]:
    """Every row the statement (a SQLAlchemy one) returns."""
    return list((await connection.execute(statement, params)).all())


async def fetch_one(
    connection: AsyncConnection, statement: Any, params: dict[str, Any] | None = None
) -> Any:
    """The first row the statement (a SQLAlchemy one) returns, or None."""
    return (await connection.execute(statement, params)).first()
