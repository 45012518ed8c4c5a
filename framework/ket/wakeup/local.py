"""In-process wake-ups: "work may be available on these queues", across event loops and threads."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ket import process
from ket.store.watch import JobWatch, resolve


class Wakeups:
    """Waiters register the queues they serve; `notify` wakes those whose queues it names.

    Waiters may sit on different event loops (one per test, or per thread), so each is woken on
    its own loop. A notify made on the waiter's own loop (the PostgreSQL listener's, or a store
    handle's after an insert) resolves the waiter at once: the hop through
    call_soon_threadsafe, a write to the loop's self-pipe and one more turn of the loop, would
    sit on the path from a NOTIFY to the claim it triggers.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: list[JobWatch] = []
        # queues woken for a job someone else enqueued, until their next claim takes the mark
        # (its wait for a connection goes before the sweeps and ticks: ket.connection.budget),
        # and how to hurry the claims of each queue that wait now
        self._prompted: set[str] = set()
        self._claiming: dict[str, list[Callable[[], None]]] = {}
        # queue -> the monotonic time of its latest wake-up (the worker's claims compare it
        # with when their statement began: a wake-up before that, the claim saw to already)
        self.woken_at: dict[str, float] = {}

    def notify_prompt(self, queues: Iterable[str]) -> None:
        """`notify`, for jobs an application enqueued: their claim should not wait its turn,
        nor a claim of their queue that waits already."""
        queues = list(queues)
        for queue in queues:
            for hurry in list(self._claiming.get(queue, ())):
                hurry()
        self._prompted.update(queues)
        self.notify(queues)

    @contextlib.contextmanager
    def claiming(self, queue: str, hurry: Callable[[], None]) -> Iterator[None]:
        """Within the block a claim of `queue` is under way: `notify_prompt` calls `hurry`."""
        hurries = self._claiming.setdefault(queue, [])
        hurries.append(hurry)
        try:
            yield
        finally:
            hurries.remove(hurry)
            if not hurries:
                del self._claiming[queue]

    def take_prompt(self, queue: str) -> bool:
        """Whether `queue` was woken by `notify_prompt` since this was last asked (it clears)."""
        if queue in self._prompted:
            self._prompted.discard(queue)
            return True
        return False

    def notify(self, queues: Iterable[str]) -> None:
        """Wake every waiter serving any of `queues`."""
        if not self._waiters and not self.woken_at:  # a producer's: nobody here to wake
            return
        names = set(queues)
        if names:
            now = time.monotonic()
            for name in names:
                self.woken_at[name] = now
            self._wake(lambda waiter: not names.isdisjoint(waiter.queues))

    def heard_from(self, payload: str, pid: int) -> None:
        """A notification naming queue `payload`, sent by server process `pid` (a listener's
        delivery; the control channel's router tells its own echoes by the PID)."""
        self.notify([payload])

    def notify_all(self) -> None:
        """Wake every waiter (after a reconnect, when notifications may have been missed)."""
        now = time.monotonic()
        with self._lock:
            waiting = {name for waiter in self._waiters for name in waiter.queues}
        # the waiters' queues too, never woken before: a claim loop that compares the wake-up
        # with its last claim (woken_since_claim) would otherwise take it for an old one and
        # wait again, for as long as before
        for name in waiting | self.woken_at.keys():
            self.woken_at[name] = now
        self._wake(lambda waiter: True)

    def _wake(self, wanted: Callable[[JobWatch], bool]) -> None:
        with self._lock:
            chosen = [w for w in self._waiters if wanted(w)]
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # a plain thread: every waiter is on another loop
            here = None
        for waiter in chosen:
            if waiter.loop is here:
                resolve(waiter.woken, True)
                continue
            # a closed loop raises RuntimeError: nobody is waiting there any more
            with contextlib.suppress(RuntimeError):
                waiter.loop.call_soon_threadsafe(resolve, waiter.woken, True)

    def watch(self, queues: Collection[str], timeout: float) -> JobWatch:
        """A wait for a wake-up on any of `queues`, registered now, which times out after
        `timeout` seconds. A future and a timer rather than wait_for(event.wait()): no task of
        its own to start, nor to switch through when the wake-up comes."""
        watch = JobWatch.timed(timeout, queues)
        watch.owner = self
        with self._lock:
            self._waiters.append(watch)
        return watch

    def unwatch(self, watch: JobWatch) -> None:
        with self._lock:
            if watch in self._waiters:
                self._waiters.remove(watch)

    async def wait(self, queues: Collection[str], timeout: float) -> bool:
        """Wait for a wake-up on any of `queues`; False when `timeout` seconds pass first."""
        return await self.watch(queues, timeout).wait()


class Hints(Protocol):
    """Where a store's commits are hinted to the workers of other processes (the control
    channel: ket.wakeup.control_channel); `woken`: the queues woken in this process already."""

    def sent(self, queues: Collection[str], woken: Collection[str] = ()) -> None: ...


@dataclass(frozen=True)
class WakePath:
    """The one wake path after a commit that made jobs runnable: this process's waiters wake
    now (and, on SQLite, every other process waiting on the file: FolderWakeups), and with
    `hints` (several tenants on PostgreSQL) the workers of other processes get a hint. The
    stores and the synchronous client take this path, each after its own commits."""

    wakeups: Wakeups
    hints: Hints | None = None

    def available(self, woken: Collection[str], hinted: Collection[str] | None = None) -> None:
        """Jobs committed that `woken` may run now (and the rest of `hinted`, later)."""
        self.wakeups.notify(woken)
        if self.hints is not None:
            self.hints.sent(woken if hinted is None else hinted, woken=woken)


class SharedWakeups:
    """The process's Wakeups, one per database (by key), shared by all its handles (a part of
    the process: ket.process)."""

    def __init__(self) -> None:
        self._by_key: dict[str, Wakeups] = {}
        self._lock = threading.Lock()

    def get(self, key: str, make: Callable[[], Wakeups]) -> Wakeups:
        with self._lock:
            if key not in self._by_key:
                self._by_key[key] = make()
            return self._by_key[key]


def shared(key: str, make: Callable[[], Wakeups] = Wakeups) -> Wakeups:
    """The process-wide Wakeups of one database (by key), shared by all its handles; `make`
    builds it on first use."""
    return process.current().part(SharedWakeups).get(key, make)
