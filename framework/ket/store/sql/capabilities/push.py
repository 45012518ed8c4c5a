"""PushStore: a wait for a wake-up on some queues (NOTIFY through the listener on PostgreSQL,
the control channel's hints with several tenants, a datagram on SQLite).
"""

from __future__ import annotations

from collections.abc import Collection

from ket.errors import StoreError
from ket.store import validate
from ket.store.failure import translated
from ket.store.sql.capabilities.session import SqlSession
from ket.store.watch import JobWatch
from ket.wakeup import listener as listening

# The longest a wait for work waits for LISTEN to be in place (after that it waits on: the
# listener's verdict, up or deaf, wakes every waiter).
LISTEN_READY_SECONDS = 30.0


class SqlPush(SqlSession):
    """Waits for wake-ups."""

    async def wait_for_jobs(self, queues: Collection[str], timeout: float) -> bool:
        """Wait for a wake-up (NOTIFY on PostgreSQL, a datagram on SQLite) or the timeout."""
        return await (await self.watch_for_jobs(queues, timeout)).wait()

    async def watch_for_jobs(self, queues: Collection[str], timeout: float) -> JobWatch:
        """A wait for a wake-up on `queues`, registered when this returns (LISTEN in place, or
        the wait shortened to a poll while NOTIFY is deaf)."""
        validate.check_timeout(timeout)
        if self._closed:
            raise StoreError("the store is closed")
        with translated(self._failure):
            if self._dsn is not None:
                if self._listener is None:
                    self._listener = (
                        listening.acquire(self._dsn, self._wakeups)
                        if self._channel is None
                        else self._channel.listen(self._wakeups)
                    )
                await self._listener.ready(min(timeout, LISTEN_READY_SECONDS))
                timeout = self._listener.max_wait(timeout)  # poll-only while NOTIFY is deaf
            elif self.dialect == "sqlite":
                from ket.wakeup import sqlite as sqlite_wakeup

                if isinstance(self._wakeups, sqlite_wakeup.FolderWakeups):
                    self._inbox = sqlite_wakeup.listening(self._wakeups, self._inbox)
        return self._wakeups.watch(queues, timeout)
