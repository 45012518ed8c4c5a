"""The abort signal a handler watches: aborted on timeout, shutdown or an operator's cancel.

Every attempt gets one, and almost none is ever aborted, so a signal is a plain reason until
something waits on it: the threading.Event a plain handler's `sleep()` blocks on is made by the
first `sleep()`, and the loop callbacks of `wait()` and of the runtime are listed on demand.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import Callable
from typing import Literal

from ket.errors import Aborted

AbortReason = Literal["timeout", "shutdown", "cancelled", "lease lost"]

# One lock for every signal: it is taken only to abort, to make a sleeper's Event or to add a
# listener, all rare or brief, and a lock per signal would cost every attempt its making.
_LOCK = threading.Lock()


class AbortSignal:
    """Set once, from any thread; read from the handler's thread or awaited on its loop.

    Example::

        for item in items:
            ctx.signal.throw_if_aborted()
            process(item)
    """

    __slots__ = ("_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: AbortReason | None = None
        self._event: threading.Event | None = None  # made by the first sleep()
        self._listeners: list[tuple[asyncio.AbstractEventLoop, Callable[[], object]]] | None = None

    @property
    def aborted(self) -> bool:
        """Whether the signal was aborted."""
        return self._reason is not None

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
        if self._reason is not None:
            return self._reason
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._on_abort(loop, functools.partial(resolve, future))
        await future
        assert self._reason is not None
        return self._reason

    def sleep(self, seconds: float) -> bool:
        """For plain handlers: block up to `seconds`; True if the signal was aborted meanwhile."""
        with _LOCK:
            if self._reason is not None:
                return True
            event = self._event
            if event is None:
                event = self._event = threading.Event()
        return event.wait(seconds)

    def abort(self, reason: AbortReason) -> bool:
        """Abort with `reason` (the first reason wins); False if it was already aborted."""
        with _LOCK:
            if self._reason is not None:
                return False
            self._reason = reason
            event, listeners, self._listeners = self._event, self._listeners, None
        if event is not None:
            event.set()
        for loop, callback in listeners or ():
            _call_soon(loop, callback)
        return True

    def _on_abort(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        """The runtime's hook: call `callback` on `loop` once the signal is aborted (soon, if it
        is already), whichever thread aborts it."""
        with _LOCK:
            if self._reason is None:
                if self._listeners is None:
                    self._listeners = [(loop, callback)]
                else:
                    self._listeners.append((loop, callback))
                return
        _call_soon(loop, callback)


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
        if not loop.is_closed():
            loop.call_soon_threadsafe(callback)


def resolve(future: asyncio.Future[None]) -> None:
    """Resolve `future` unless it is done (or cancelled) already."""
    if not future.done():
        future.set_result(None)
