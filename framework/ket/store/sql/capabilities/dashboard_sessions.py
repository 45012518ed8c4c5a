"""SessionStore: the dashboard's sign-in sessions (statements in ket.store.sql.session)."""

from __future__ import annotations

from ket.store import validate
from ket.store.sql.capabilities.session import SqlSession
from ket.store.types import DashboardSession


class SqlDashboardSessions(SqlSession):
    """The dashboard's sessions."""

    async def session_open(self, session: DashboardSession, *, ttl_seconds: float) -> None:
        """Keep `session` until `ttl_seconds` after the store's now."""
        validate.check_session(session, ttl_seconds)
        now = self._now()
        from ket.store.sql import session as sessions

        await self._transact(lambda conn: sessions.open_session(conn, session, ttl_seconds, now))

    async def session_find(self, key: str) -> DashboardSession | None:
        """The live session with `key`, if any."""
        validate.check_session_key(key)
        now = self._now()
        from ket.store.sql import session as sessions

        return await self._transact(lambda conn: sessions.find_session(conn, key, now), single=True)

    async def session_close(self, key: str) -> None:
        """End the session with `key`."""
        validate.check_session_key(key)
        from ket.store.sql import session as sessions

        await self._transact(lambda conn: sessions.close_session(conn, key))
