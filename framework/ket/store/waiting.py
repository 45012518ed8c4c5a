"""Time a caller spends waiting for room for a connection is not its own.

A worker's connection budget may have no room for a handler's `ctx.db` or `ctx.tx` connection
yet: with a small budget and many tenants, a handler can wait for one behind the others. That
wait is the worker's doing, not the handler's, so an attempt's timeout must not run out in it.
The runner names the attempt's clock for the handler's context; whatever waits for room pauses
it while it waits.

    token = timed_by(watch)         # the runner, around the handler (its threads included)
    ...
    untimed(token)
    paused = pause_attempt()        # the connection budget, as a caller begins to wait
    ...                             # for room, and once it has it:
    if paused is not None: paused.resume()
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Protocol


class PausableClock(Protocol):
    """An attempt's clock: `pause()` and `resume()` come in pairs, and may nest."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


_CLOCK: ContextVar[PausableClock | None] = ContextVar("ket_attempt_clock", default=None)


def timed_by(clock: PausableClock | None) -> Token[PausableClock | None]:
    """From now on in this context (and the tasks and threads it starts), waits for room pause
    `clock` (None: no clock); `untimed(token)` puts back what was before. Not a context
    manager: every attempt does this, and a generator's cost would be most of it."""
    return _CLOCK.set(clock)


def untimed(token: Token[PausableClock | None]) -> None:
    """Undo the `timed_by` that gave `token`."""
    _CLOCK.reset(token)


def pause_attempt() -> PausableClock | None:
    """A wait for room begins: the clock of the attempt it waits for, if any, stops; the caller
    resumes what this returns once the wait is over."""
    clock = _CLOCK.get()
    if clock is not None:
        clock.pause()
    return clock


class Sent:
    """When a statement that sets or renews leases was sent, on the caller's monotonic clock: at
    first when it was asked for (the earliest it can have been), then moved to when its
    connection was in hand (`in_hand`, by the SQL store's lane), once. A claim that waited five
    seconds for a connection within a spent budget took its leases then, not when it asked: its
    attempts' leases are known to last that much longer, and the lease guard gives none up for
    a wait that was not the database's."""

    __slots__ = ("at", "clock", "moved")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock  # the attempts' clock: `at` is read from it both times
        self.at = clock()
        self.moved = False


_SENT: ContextVar[Sent | None] = ContextVar("ket_statement_sent", default=None)


def sending(sent: Sent) -> Token[Sent | None]:
    """From now on in this context, the first connection in hand moves `sent`; `unsent(token)`
    puts back what was before."""
    return _SENT.set(sent)


def unsent(token: Token[Sent | None]) -> None:
    _SENT.reset(token)


def in_hand() -> None:
    """A connection is in hand for a statement: the `Sent` of this context, if any and not
    moved yet, moves to now (on its own clock)."""
    sent = _SENT.get()
    if sent is not None and not sent.moved:
        sent.at = sent.clock()
        sent.moved = True
