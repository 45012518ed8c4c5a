"""The sent ledger in SQL: claim a message key (insert, or take over a stale claim), confirm it,
release it. One statement each, built once per dialect like query.py's.

A claim is an upsert whose update only happens when the row is a claim older than the staleness
(compare-and-set): concurrent claimers of one key meet at the primary key, and the database lets
exactly one of them insert or take over; the rest get no row back.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import ColumnClause, and_, bindparam, delete, func, literal_column, select
from sqlalchemy.dialects import postgresql, sqlite

from ket.store.sql.now import TimeSql
from ket.store.sql.schema import sent_messages

# literal SQL, like schema.py's state predicates: constants, not parameters
_CLAIMED: ColumnClause[Any] = literal_column("'claimed'")
_SENT: ColumnClause[Any] = literal_column("'sent'")


@dataclass(frozen=True)
class LedgerStatements:
    """The sent ledger's statements in one dialect (parameters: `p_key` and the time ones)."""

    claim: Any  # RETURNING key when this caller claimed it; time parameter `stale`
    confirm: Any
    release: Any
    sent: Any


@cache
def statements(dialect: str) -> LedgerStatements:
    """The cached sent-ledger statements of `dialect`."""
    time = TimeSql(dialect)
    upsert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    table = sent_messages
    key = bindparam("p_key", type_=table.c.key.type)

    new_claim = upsert(table).values(key=key, state=_CLAIMED, claimed_at=time.now(), sent_at=None)
    claim = new_claim.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={"state": _CLAIMED, "claimed_at": new_claim.excluded.claimed_at, "sent_at": None},
        where=and_(table.c.state == _CLAIMED, table.c.claimed_at < time.at("stale")),
    ).returning(table.c.key)

    # A confirmation is recorded whatever became of the claim (released, taken over): the
    # message went out, so its key must never be sent again.
    sent = upsert(table).values(key=key, state=_SENT, claimed_at=time.now(), sent_at=time.now())
    confirm = sent.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={"state": _SENT, "sent_at": func.coalesce(table.c.sent_at, sent.excluded.sent_at)},
    )

    release = delete(table).where(table.c.key == key, table.c.state == _CLAIMED)
    was_sent = select(table.c.key).where(table.c.key == key, table.c.state == _SENT)
    return LedgerStatements(claim=claim, confirm=confirm, release=release, sent=was_sent)
