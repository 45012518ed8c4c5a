"""PostgreSQL LISTEN: one connection per database (and event loop) in a process, turning NOTIFY
into wake-ups and reconnecting by itself.

NOTIFY is scoped to a database, so a process serving several tenant databases holds one LISTEN
connection for each; store handles on the same database share it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import psycopg

from ket.store.sql.insert import CHANNEL
from ket.store.wakeup import Wakeups

log = logging.getLogger("ket.store.listener")


class Listener:
    """Listens on the jobs channel and wakes waiters; started on first use."""

    def __init__(self, dsn: str, wakeups: Wakeups) -> None:
        self._dsn = dsn
        self._wakeups = wakeups
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    async def ready(self, timeout: float) -> None:
        """Start listening if not yet, and wait (up to `timeout`) until LISTEN is in place."""
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ket-listener")
        if not self._listening.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._listening.wait(), timeout)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True
                ) as connection:
                    await connection.execute(f"LISTEN {CHANNEL}")
                    if self._listening.is_set():
                        # a reconnect: what was sent meanwhile is lost, so wake everyone once
                        self._wakeups.notify_all()
                    self._listening.set()
                    delay = 0.1
                    async for notification in connection.notifies():
                        self._wakeups.notify([notification.payload])
            except (psycopg.Error, OSError) as error:
                log.warning("job listener lost its connection: %s; retrying in %.1fs", error, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)


_SHARED: dict[tuple[str, int], tuple[Listener, int]] = {}


def acquire(dsn: str, wakeups: Wakeups) -> Listener:
    """The process's listener for `dsn` on the running loop (one more user of it)."""
    key = (dsn, id(asyncio.get_running_loop()))
    listener, users = _SHARED.get(key, (None, 0))
    if listener is None:
        listener = Listener(dsn, wakeups)
    _SHARED[key] = (listener, users + 1)
    return listener


async def release(dsn: str, listener: Listener) -> None:
    """One user fewer; the last one stops the listener."""
    key = (dsn, id(asyncio.get_running_loop()))
    current, users = _SHARED.get(key, (None, 0))
    if current is not listener:
        await listener.stop()
        return
    if users <= 1:
        del _SHARED[key]
        await listener.stop()
    else:
        _SHARED[key] = (listener, users - 1)
