"""The abort signal a handler watches: aborted on timeout, shutdown or an operator's cancel."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from ket.errors import Aborted

AbortReason = Literal["timeout", "shutdown", "cancelled", "lease lost"]


class AbortSignal:
    """Set once, from any thread; read from the handler's thread or awaited on its loop.

    Example::

        for item in items:
            ctx.signal.throw_if_aborted()
            process(item)
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._reason: AbortReason | None = None
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def aborted(self) -> bool:
        """Whether the signal was aborted."""
        return self._event.is_set()

    @property
    def reason(self) -> AbortReason | None:
        """Why: "timeout", "shutdown", "cancelled" or "lease lost"; None while not aborted."""
        return self._reason

    def throw_if_aborted(self) -> None:
        """Raise Aborted(reason) if the signal was aborted."""
        if self._reason is not None:
            raise Aborted(self._reason)

    async def wait(self) -> AbortReason:
        """Wait until the signal is aborted; returns the reason."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._reason is not None:
                return self._reason
            self._waiters.append((loop, future))
        await future
        assert self._reason is not None
        return self._reason

    def sleep(self, seconds: float) -> bool:
        """For plain handlers: block up to `seconds`; True if the signal was aborted meanwhile."""
        return self._event.wait(seconds)

    def abort(self, reason: AbortReason) -> bool:
        """Abort with `reason` (the first reason wins); False if it was already aborted."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            self._event.set()
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(_resolve, future)
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
