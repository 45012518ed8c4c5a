"""A burst (`ket worker --burst`): when a tenant worker has run everything that is due.

A burst runs the tenant's worker as it always runs (queue loops, runner, settler, heartbeats,
under the supervisor) with three differences: it rescues expired leases and sweeps the schedules
once, at the start, before its queues claim, instead of periodically; a queue whose claim comes
back short waits for the next recorded outcome instead of a wake-up or a poll; and once the
tenant is drained its worker is stopped as at a signal (runtime/fleet.py).

A tenant whose database fails that start (no ket tables, a database away) is given up at once,
nothing claimed: a burst run from cron must end, and say so, rather than wait for a fix. A
failure later, with work under way, is retried as a worker retries it.

Drained means: the first sweep is done, every job claimed has its outcome recorded, and every
queue's last claim came back short and began after the last outcome was recorded. A handler's
enqueues commit before it returns, so before its outcome is recorded: a claim that began after
every outcome saw every job they enqueued that was due by then. Jobs due later are left alone.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ket.runtime.lease import Attempts
    from ket.runtime.runner import Result

Report = Callable[["Result", bool], None]


class Burst:
    """Tells one tenant worker's queue loops when to claim again, and the fleet when the tenant
    is done (drained, or given up); counts the outcomes."""

    def __init__(self, queues: Collection[str], attempts: Attempts, report: Report) -> None:
        self._queues = frozenset(queues)
        self._attempts = attempts
        self._report = report
        self.epoch = 0  # grows with every outcome recorded, and with the first sweep
        self._recorded = 0  # outcomes recorded (the claimed jobs that are over)
        self._swept = False
        self._short: dict[str, int] = {}  # queue -> the epoch its last (short) claim began in
        self._moved = asyncio.Event()  # replaced each time the epoch grows
        self.done = asyncio.Event()  # drained, or given up
        self.failure: str | None = None  # why it was given up
        self.outcomes: Counter[str] = Counter()  # by kind: completed, failed, discarded, ...

    @property
    def discarded(self) -> int:
        """How many of the jobs it ran it discarded (by Discard, attempts exhausted, ...)."""
        return self.outcomes["discarded"]

    def report(self, result: Result, applied: bool) -> None:
        """The settler's report: the runner's, then counted."""
        self._report(result, applied)
        self.outcomes[result.kind if applied or result.settle is None else "lease_lost"] += 1
        self._recorded += 1
        self._moved_on()

    def swept(self) -> None:
        """The first rescue and sweep are done: the jobs they made due are committed."""
        self._swept = True
        self._moved_on()

    def give_up(self, error: Exception) -> None:
        """The start failed (the supervisor logged it): the tenant is done, not drained."""
        try:
            self.failure = str(error) or type(error).__name__
        except Exception:  # a __str__ that raises: the log has what could be said
            self.failure = type(error).__name__
        self.done.set()

    async def short(self, queue: str, epoch: int) -> None:
        """`queue`'s claim, begun in `epoch`, came back short: return once an outcome was
        recorded since (its job may have enqueued more); never, once the tenant is done."""
        self._short[queue] = epoch
        self._check()
        while self.epoch == epoch:
            await self._moved.wait()

    def _moved_on(self) -> None:
        self.epoch += 1
        moved, self._moved = self._moved, asyncio.Event()
        moved.set()
        self._check()

    def _check(self) -> None:
        epoch = self.epoch
        if (
            self._swept
            and self._recorded == self._attempts.started
            and all(self._short.get(queue) == epoch for queue in self._queues)
        ):
            self.done.set()
