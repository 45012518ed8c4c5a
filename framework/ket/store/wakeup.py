"""In-process wake-ups: "work may be available on these queues", across event loops and threads."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Waiter:
    queues: frozenset[str]
    loop: asyncio.AbstractEventLoop
    event: asyncio.Event = field(default_factory=asyncio.Event)


class Wakeups:
    """Waiters register the queues they serve; `notify` wakes those whose queues it names.

    Waiters may sit on different event loops (one per test, or per thread), so each is woken on
    its own loop with call_soon_threadsafe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[_Waiter] = []

    def notify(self, queues: Iterable[str]) -> None:
        """Wake every waiter serving any of `queues`."""
        if not self._waiters:  # a producer's store, most often: nobody here to wake
            return
        names = set(queues)
        if names:
            self._wake(lambda waiter: not waiter.queues.isdisjoint(names))

    def notify_all(self) -> None:
        """Wake every waiter (after a reconnect, when notifications may have been missed)."""
        self._wake(lambda waiter: True)

    def _wake(self, wanted: Callable[[_Waiter], bool]) -> None:
        with self._lock:
            chosen = [w for w in self._waiters if wanted(w)]
        for waiter in chosen:
            # a closed loop raises RuntimeError: nobody is waiting there any more
            with contextlib.suppress(RuntimeError):
                waiter.loop.call_soon_threadsafe(waiter.event.set)

    async def wait(self, queues: Collection[str], timeout: float) -> bool:
        """Wait for a wake-up on any of `queues`; False when `timeout` seconds pass first."""
        waiter = _Waiter(frozenset(queues), asyncio.get_running_loop())
        with self._lock:
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter.event.wait(), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._waiters.remove(waiter)


_SHARED: dict[str, Wakeups] = {}
_SHARED_LOCK = threading.Lock()


def shared(key: str, make: Callable[[], Wakeups] = Wakeups) -> Wakeups:
    """The process-wide Wakeups of one database (by key), shared by all its handles; `make`
    builds it on first use."""
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = make()
        return _SHARED[key]
