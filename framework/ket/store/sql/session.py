"""The dashboard's sign-in sessions in SQL (ket_sessions): open one (letting expired ones go),
find a live one, close one. Statements built once per dialect, like ledger.py's; operator paths,
run on the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import bindparam, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.column import Json
from ket.store.sql.fetch import fetch_all
from ket.store.sql.now import TimeSql, time_params
from ket.store.sql.schema import sessions
from ket.store.types import DashboardSession


@dataclass(frozen=True)
class SessionStatements:
    """The session statements of one dialect (parameters `p_*` and the time ones)."""

    sweep: Any
    open: Any
    find: Any
    close: Any


@cache
def statements(dialect: str) -> SessionStatements:
    """The cached session statements of `dialect`."""
    time = TimeSql(dialect)
    table = sessions
    key = bindparam("p_key", type_=table.c.key.type)
    opened = insert(table).values(
        key=key,
        subject=bindparam("p_subject", type_=table.c.subject.type),
        company=bindparam("p_company", type_=table.c.company.type),
        permissions=bindparam("p_permissions", type_=Json),
        opened_at=time.now(),
        expires_at=time.at("ttl"),
    )
    live = table.c.expires_at > time.now()
    found = select(table.c.subject, table.c.company, table.c.permissions, table.c.expires_at)
    return SessionStatements(
        sweep=delete(table).where(table.c.expires_at <= time.now()),
        open=opened,
        find=found.where(table.c.key == key, live),
        close=delete(table).where(table.c.key == key),
    )


async def open_session(
    connection: AsyncConnection, session: DashboardSession, ttl: float, now: datetime | None
) -> None:
    """Let expired sessions go, then keep `session` until `ttl` seconds after `now`."""
    made = statements(connection.dialect.name)
    params = time_params(now, ttl=ttl)
    await connection.execute(made.sweep, params)
    await connection.execute(
        made.open,
        {
            **params,
            "p_key": session.key,
            "p_subject": session.subject,
            "p_company": session.company,
            "p_permissions": list(session.permissions),
        },
    )


async def find_session(
    connection: AsyncConnection, key: str, now: datetime | None
) -> DashboardSession | None:
    """The live session with `key`, if any."""
    made = statements(connection.dialect.name)
    rows = await fetch_all(connection, made.find, {**time_params(now), "p_key": key})
    if not rows:
        return None
    [row] = rows
    return DashboardSession(
        key=key,
        subject=row.subject,
        company=row.company,
        permissions=tuple(row.permissions),
        expires_at=row.expires_at,
    )


async def close_session(connection: AsyncConnection, key: str) -> None:
    """End the session with `key`."""
    await connection.execute(statements(connection.dialect.name).close, {"p_key": key})
