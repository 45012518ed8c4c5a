"""Wake-ups between handles of one memory database, across threads and event loops."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Collection


class _Waiter:
    """One pending wait_for_jobs call, on the event loop it runs on."""

    __slots__ = ("event", "loop", "owner", "queues", "woken")

    def __init__(self, queues: frozenset[str], owner: object) -> None:
        self.queues = queues
        self.owner = owner
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()
        # Set under the lock when a wake-up is sent, so one that races the timeout still counts.
        self.woken = False


class WakeSignal:
    """Idle waiters per database; a notify wakes those waiting on any of its queues.

    Each waiter owns an asyncio.Event of its own loop, set with call_soon_threadsafe: handles of
    one database may run on different loops (each test's asyncio.run) or threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[_Waiter] = set()

    async def wait(self, queues: Collection[str], timeout: float, owner: object) -> bool:
        """Wait until notified on one of `queues` (True) or `timeout` seconds pass (False)."""
        waiter = _Waiter(frozenset(queues), owner)
        with self._lock:
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter.event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(waiter)
        return waiter.woken

    def notify(self, queues: Collection[str]) -> None:
        """Wake every waiter on any of `queues` (after the writes that made work available)."""
        if not queues:
            return
        with self._lock:
            targets = [w for w in self._waiters if not w.woken and not w.queues.isdisjoint(queues)]
            for waiter in targets:
                waiter.woken = True
        for waiter in targets:
            _set_soon(waiter)

    def release(self, owner: object) -> None:
        """End the waits of a handle being closed, without reporting a wake-up."""
        with self._lock:
            targets = [w for w in self._waiters if w.owner is owner]
        for waiter in targets:
            _set_soon(waiter)


def _set_soon(waiter: _Waiter) -> None:
    # A closed loop raises RuntimeError: its waiter is gone with it.
    with contextlib.suppress(RuntimeError):
        waiter.loop.call_soon_threadsafe(waiter.event.set)
