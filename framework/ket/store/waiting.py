"""Time a caller spends waiting for room for a connection is not its own.

A worker's connection budget may have no room for a handler's `ctx.db` or `ctx.tx` connection
yet: with a small budget and many tenants, a handler can wait for one behind the others. That
wait is the worker's doing, not the handler's, so an attempt's timeout must not run out in it.
The runner names the attempt's clock for the handler's context; whatever waits for room pauses
it while it waits.

    with timed_by(watch):           # the runner, around the handler (its threads included)
        ...
    with waiting():                 # the connection budget, while a caller waits for room
        await ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class PausableClock(Protocol):
    """An attempt's clock: `pause()` and `resume()` come in pairs, and may nest."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


_CLOCK: ContextVar[PausableClock | None] = ContextVar("ket_attempt_clock", default=None)


@contextmanager
def timed_by(clock: PausableClock) -> Iterator[None]:
    """Within the block (and the tasks and threads it starts), waits for room pause `clock`."""
    token = _CLOCK.set(clock)
    try:
        yield
    finally:
        _CLOCK.reset(token)


@contextmanager
def waiting() -> Iterator[None]:
    """The block is a wait for room: the clock of the attempt it waits for, if any, stops."""
    clock = _CLOCK.get()
    if clock is None:
        yield
        return
    clock.pause()
    try:
        yield
    finally:
        clock.resume()
