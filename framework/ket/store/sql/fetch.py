"""Running one statement and taking its rows."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection


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
