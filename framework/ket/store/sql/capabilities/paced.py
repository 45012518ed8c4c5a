"""PacedStore: what lets a thousand idle tenants cost little. How long an idle queue may wait,
a wake-up when its next job is due, the safety visit's question (`look`), and whether a
wake-up came after a claim began (so that one wake-up costs one claim).
"""

from __future__ import annotations

import math
from collections.abc import Collection

from ket.store.sql import statement as stmt
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.now import time_params
from ket.store.types import Look


class SqlPacing(SqlSession):
    """The pacing of idle queues."""

    @property
    def paced(self) -> bool:
        """Whether this tenant's wake-ups come through the control channel (several tenants
        on PostgreSQL, see control_channel): the worker then visits it on a slow safety sweep
        rather than having each queue poll."""
        return self._channel is not None

    def idle_poll(self, poll_max: float) -> float:
        """How long a queue with no due job may wait for a wake-up before it claims again:
        `poll_max`; with the control channel listening, for ever (`math.inf`): the hints,
        `wake_when_due` and the worker's safety visit wake a queue when it has work, and the
        listener wakes every waiter when it is lost (its queues then poll every `poll_max`).
        A thousand idle tenants' queues then hold no timer, nor claim in vain every few
        minutes."""
        listener = self._listener
        if self._channel is None or listener is None or not listener.healthy:
            return poll_max
        return math.inf

    def woken_since_claim(self, queue: str) -> bool:
        """Whether `queue` was woken after its last claim here began its statement (a wake-up
        before that announced a job the claim saw already, or found taken)."""
        return self._wakeups.woken_at.get(queue, 0.0) >= self._claimed_at.get(queue, -1.0)

    async def lease_end(self) -> float | None:
        """Seconds until the earliest lease of an executing job ends; None when none runs."""
        params = time_params(self._now())
        rows = await self._hot(lambda conn: conn.rows(stmt.LEASE_END, params), single=True)
        if not rows or rows[0].ends is None:
            return None
        left: float = (rows[0].ends - rows[0].now).total_seconds()
        return max(left, 0.0)

    async def wake_when_due(self, queue: str) -> None:
        """Wake `queue` when its next runnable job is due (a job enqueued to run later, a
        retry's backoff): asked after a claim found nothing to do."""
        left = await self._next_due(queue)
        if left is not None:
            self.wake_in(queue, left)

    async def _next_due(self, queue: str) -> float | None:
        """Seconds until `queue`'s next runnable job is due (0.0: now); None: it has none."""
        params = {**time_params(self._now()), "p_queue": queue}
        rows = await self._hot(lambda conn: conn.rows(stmt.NEXT_DUE, params), single=True)
        if not rows or rows[0].due is None:
            return None
        left: float = (rows[0].due - rows[0].now).total_seconds()
        return max(left, 0.0)

    async def look(self, queues: Collection[str]) -> Look:
        """The safety visit's question in one statement (PostgreSQL): when the earliest lease
        ends, and when each of `queues` has its next runnable job due."""
        if self.dialect != "postgresql":  # no worker visits SQLite: the same answer, slower
            return await self._look_each(queues)
        params = {**time_params(self._now()), "p_queues": list(queues)}
        rows = await self._hot(lambda conn: conn.rows(stmt.LOOK, params), single=True)
        lease_end: float | None = None
        due: dict[str, float] = {}
        for row in rows:
            if row.at is None:
                continue
            left = max((row.at - row.now).total_seconds(), 0.0)
            if row.queue is None:
                lease_end = left
            else:
                due[row.queue] = left
        return Look(lease_end=lease_end, due=due)

    async def _look_each(self, queues: Collection[str]) -> Look:
        """`look` as a statement per question."""
        due: dict[str, float] = {}
        for queue in queues:
            left = await self._next_due(queue)
            if left is not None:
                due[queue] = left
        return Look(lease_end=await self.lease_end(), due=due)
