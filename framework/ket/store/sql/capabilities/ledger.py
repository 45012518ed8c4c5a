"""SentLedger: the messages `ctx.transport` sent, so that a retried attempt does not send
one twice.
"""

from __future__ import annotations

from ket.store import validate
from ket.store.sql import statement as stmt
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.now import time_params


class SqlSentLedger(SqlSession):
    """The sent ledger."""

    async def message_claim(self, key: str, *, stale_after_seconds: float) -> bool:
        """Claim `key`; False if it was sent, or claimed less than `stale_after_seconds` ago."""
        validate.check_message_claim(key, stale_after_seconds)
        params = time_params(self._now(), stale=-stale_after_seconds)
        params["p_key"] = key
        rows = await self._hot(lambda conn: conn.rows(stmt.LEDGER_CLAIM, params), single=True)
        return bool(rows)

    async def message_confirm(self, key: str) -> None:
        """Record that the message with `key` was sent."""
        validate.check_message_key(key)
        params = {"now": self._now(), "p_key": key}
        await self._hot(lambda conn: conn.rows(stmt.LEDGER_CONFIRM, params), single=True)

    async def message_release(self, key: str) -> None:
        """Give up a claim that did not end in a send (a sent message stays recorded)."""
        validate.check_message_key(key)
        params = {"p_key": key}
        await self._hot(lambda conn: conn.rows(stmt.LEDGER_RELEASE, params), single=True)

    async def message_sent(self, key: str) -> bool:
        """Whether the message with `key` was confirmed sent."""
        validate.check_message_key(key)
        params = {"p_key": key}
        rows = await self._hot(lambda conn: conn.rows(stmt.LEDGER_SENT, params), single=True)
        return bool(rows)
