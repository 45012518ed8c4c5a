"""A flag that tasks wait on and callbacks watch: a small asyncio.Event for per-tenant state.

A worker serving a thousand tenants holds a handful of flags per tenant (a queue's slot freed,
the database reachable, attempts watched, the worker stopping). An asyncio.Event holds a deque
from birth, about 700 bytes, and a task that waits for one holds a task, a coroutine and a
future while nothing happens. A `Flag` holds two slots until someone waits; and `when_set`
lets a service that has nothing to do until the flag is set hold no task at all (the
supervisor's gated services, its sleeps woken at the stop signal).

Like asyncio.Event it is not thread-safe: set it on the event loop its waiters run on.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable


class Flag:
    """`set`, `clear`, `is_set` and `wait` as asyncio.Event's; `when_set(callback)` once."""

    __slots__ = ("_set", "_watchers")

    def __init__(self) -> None:
        self._set = False
        self._watchers: list[Callable[[], None]] | None = None  # made when one is added

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        """Set it: every callback is called (once, and forgotten), every waiter wakes."""
        if self._set:
            return
        self._set = True
        watchers, self._watchers = self._watchers, None
        for callback in watchers or ():
            callback()

    def clear(self) -> None:
        self._set = False

    async def wait(self) -> bool:
        """Until it is set (at once if it is); True, as asyncio.Event's."""
        if self._set:
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        wake = functools.partial(_wake, future)
        self.when_set(wake)
        try:
            await future
        finally:
            self.forget(wake)  # cancelled while waiting
        return True

    def when_set(self, callback: Callable[[], None]) -> None:
        """Call `callback` once when the flag is set (now, if it is)."""
        if self._set:
            callback()
            return
        if self._watchers is None:
            self._watchers = []
        self._watchers.append(callback)

    def forget(self, callback: Callable[[], None]) -> None:
        """Do not call `callback` after all (if it has not been called yet)."""
        if self._watchers is not None and callback in self._watchers:
            self._watchers.remove(callback)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
