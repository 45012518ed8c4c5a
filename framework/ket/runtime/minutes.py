"""The minute counter: the tenant's jobs per minute and queue, for the dashboard's charts.

Once a minute it asks the store to count (MinuteStore: what was enqueued, failed and finished
since the last count, read from the jobs table, and each queue's backlog); whichever worker of
the tenant asks first counts, the others find it done. A tenant this worker started no job of
since its last tick is counted only every IDLE_EVERY ticks: what happened meanwhile is still
counted then (a count covers everything since the last), and the dashboard counts before it
reads; a thousand idle tenants cost a statement each per IDLE_EVERY minutes, not per minute.
"""

from __future__ import annotations

from ket.runtime.lease import Attempts
from ket.store.contract import MinuteStore

COUNT_EVERY_SECONDS = 60.0
IDLE_EVERY = 10  # ticks


class MinuteService:
    """Asks the store to count the last minute's jobs, every `interval` seconds."""

    name = "minutes"

    def __init__(
        self, store: MinuteStore, attempts: Attempts, *, interval: float = COUNT_EVERY_SECONDS
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._store = store
        self._attempts = attempts
        self._started = -1  # attempts.started at the last count: the first tick counts
        self._idle_ticks = 0
        self.interval = interval

    async def tick(self) -> None:
        started = self._attempts.started
        if started == self._started and self._idle_ticks < IDLE_EVERY - 1:
            self._idle_ticks += 1
            return
        self._started, self._idle_ticks = started, 0
        # a little under the interval: ticks come a little late or early, and a count that
        # found the last one a moment too recent would wait a whole interval more
        await self._store.minute_record(self.interval * 0.9)
