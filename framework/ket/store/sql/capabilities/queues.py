"""QueueControl: an operator's pause and resume of a queue (statements in ket.store.sql.queue;
the claim statements leave a paused queue's jobs where they are)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ket.store import validate
from ket.store.sql import command
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.fetch import EngineRows
from ket.store.types import QueuePause

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


class SqlQueueControl(SqlSession):
    """Paused queues."""

    async def queue_pause(self, queue: str, *, paused_by: str) -> bool:
        """Pause `queue`: no claim takes its jobs from the commit on; True when it was not
        paused (a paused queue keeps who paused it first, and when)."""
        validate.check_queue_pause(queue, paused_by)
        now = self._now()
        from ket.store.sql import queue as queues

        return await self._transact(lambda conn: queues.pause(conn, queue, paused_by, now))

    async def queue_resume(self, queue: str) -> bool:
        """Resume `queue` and wake its waiters, here and in the other processes; True when it
        was paused."""
        validate.check_queue(queue)
        from ket.store.sql import queue as queues

        async def body(conn: AsyncConnection) -> bool:
            resumed = await queues.resume(conn, queue)
            if resumed:  # NOTIFY at commit (one tenant on PostgreSQL)
                await command.wake(EngineRows(conn), [queue])
            return resumed

        resumed = await self._transact(body)
        if resumed:
            self._available([queue])
        return resumed

    async def queue_pauses(self) -> dict[str, QueuePause]:
        """The paused queues, by name."""
        from ket.store.sql import queue as queues

        return await self._transact(queues.pauses, single=True)
