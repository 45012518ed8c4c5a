"""A registered wait for work: what `PushStore.watch_for_jobs` returns."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol


class Watched(Protocol):
    """Where a watch is registered (ket.wakeup.local.Wakeups)."""

    def unwatch(self, watch: JobWatch) -> None: ...


def resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


@dataclass(eq=False, slots=True)
class JobWatch:
    """A wait for a wake-up on some queues, registered when it is made (so a job committed
    after that cannot slip past it): `woken` resolves True when one comes, False when its
    timeout passes first. Nobody needs to await it: a claim loop with nothing to do hangs a
    callback on `woken` and ends its task (runtime/queue.py). `close()` ends the wait."""

    # a tuple, not a frozenset (216 bytes): a worker holds a watch per queue
    queues: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    woken: asyncio.Future[bool]
    timer: asyncio.TimerHandle | None = None
    owner: Watched | None = None  # None: a timer alone (a store that sends no wake-ups)

    @classmethod
    def timed(cls, timeout: float, queues: Collection[str] = ()) -> JobWatch:
        """A watch that only times out (never, for `math.inf`)."""
        loop = asyncio.get_running_loop()
        watch = cls(tuple(queues), loop, loop.create_future())
        if not math.isinf(timeout):  # a wait for ever (paced by hints and visits) has no timer
            watch.timer = loop.call_later(timeout, resolve, watch.woken, False)
        return watch

    def close(self) -> None:
        """End the wait: no wake-up reaches it any more (a `woken` not yet resolved is
        cancelled)."""
        if self.timer is not None:
            self.timer.cancel()
        if self.owner is not None:
            self.owner.unwatch(self)
            self.owner = None
        if not self.woken.done():
            self.woken.cancel()

    async def wait(self) -> bool:
        """Await it, then close it: True when woken, False at its timeout."""
        try:
            return await self.woken
        finally:
            self.close()

    def outcome(self) -> bool:
        """Closed, whether it was woken (False when it timed out or was closed first)."""
        self.close()
        woken = self.woken
        return woken.done() and not woken.cancelled() and woken.result()
