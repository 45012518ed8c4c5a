"""The audit log's statements (ket_audit): append an entry, read a page newest first.

Operator paths, run on the engine (not the lane): nothing a worker does touches this table.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.fetch import fetch_all
from ket.store.sql.schema import audit
from ket.store.types import AuditEntry, AuditQuery, AuditRecord


async def append(
    connection: AsyncConnection, entry: AuditEntry, selection: str, now: datetime | None
) -> AuditRecord:
    """Insert `entry` (its selection already encoded as JSON) at `now` (None: the database's
    now); the record as stored."""
    from sqlalchemy import func

    at: Any = now if now is not None else func.now()
    statement = (
        insert(audit)
        .values(
            at=at,
            subject=entry.subject,
            source=entry.source,
            action=entry.action,
            job_id=entry.job_id,
            selection=json.loads(selection),  # as validated: plain JSON values
            matched=entry.matched,
            changed=entry.changed,
            skipped=entry.skipped,
            detail=entry.detail,
        )
        .returning(*audit.c)
    )
    [row] = await fetch_all(connection, statement)
    return _record(row)


async def page(connection: AsyncConnection, query: AuditQuery) -> list[AuditRecord]:
    """The entries of one page, newest first."""
    statement = select(audit).order_by(audit.c.id.desc()).limit(query.limit).offset(query.offset)
    if query.job_id is not None:
        statement = statement.where(audit.c.job_id == query.job_id)
    return records(await fetch_all(connection, statement))


def records(rows: Sequence[Any]) -> list[AuditRecord]:
    """Rows of ket_audit as records."""
    return [_record(row) for row in rows]


def _record(row: Any) -> AuditRecord:
    return AuditRecord(
        id=row.id,
        at=row.at,
        entry=AuditEntry(
            subject=row.subject,
            source=row.source,
            action=row.action,
            job_id=row.job_id,
            selection=row.selection,
            matched=row.matched,
            changed=row.changed,
            skipped=row.skipped,
            detail=row.detail,
        ),
    )
