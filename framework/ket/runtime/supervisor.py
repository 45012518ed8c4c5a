"""The one supervisor every background loop of a worker runs under.

A service is a small object with a `name`, an `interval` and an async `tick()` (a test calls
`tick()` directly, with the manual clock); a tick that knows when it is next due (a schedule's
next tick) returns the seconds until then instead of None. Between ticks a service holds a
timer, not a task; a service with nothing to do while a gate is down (the heartbeat while nothing
runs) holds a callback on the gate, not even a timer. A long-running loop (a queue's claim loop,
the settler) is an async function that should not return while the worker runs, unless it parks
itself (returns True: it has nothing to do, and keeps itself again when it has). The supervisor
owns the error policy, so no service has one of its own:

- any `Exception` is caught and logged with the service and tenant; the same failure repeated
  within a minute is counted, not logged, and a summary line ("N more in the last minute") follows;
- after a failure the service backs off (doubling, capped, with jitter) and goes on; a recovery
  is logged once;
- a tick that hangs (a half-open database connection) is abandoned after its timeout, logged, and
  the next tick runs;
- a loop that returns or raises while the worker runs is logged at once and restarted;
- a one-off step (a burst's start) that raises or hangs is logged the same way, and its owner
  is told (it decides what follows: a burst gives the tenant up).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ket.errors import KetError, NoRoom
from ket.runtime.flag import Flag

log = logging.getLogger("ket.worker")

T = TypeVar("T")

REPEAT_WINDOW_SECONDS = 60.0
MAX_BACKOFF_SECONDS = 30.0
# how long stop() waits for the cancelled services and loops
STOP_WAIT_SECONDS = 10.0


class Service(Protocol):
    """A periodic background service: `tick()` every `interval` seconds."""

    name: str
    interval: float

    async def tick(self) -> float | None:
        """Do one round of the service's work; raise on failure (the supervisor handles it).
        Returns None to tick again after `interval`, or the seconds until it is due again."""
        ...


class TickTimeout(Exception):
    """A tick did not finish in time; it was abandoned."""


@dataclass(eq=False)
class _Seen:
    since: float
    suppressed: int = 0


class Repeats:
    """Logs failures so that a repeating one costs a line a minute, not a line a tick."""

    def __init__(
        self,
        logger: logging.Logger = log,
        *,
        window: float = REPEAT_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._window = window
        self._clock = clock
        self._seen: dict[tuple[str, str], _Seen] = {}

    def failure(self, where: str, error: BaseException, *, level: int = logging.ERROR) -> bool:
        """Log `error` of `where` unless the same one was logged within the window; True if
        it was logged."""
        if not self.due(where, _signature(error)):
            return False
        if isinstance(error, NoRoom):  # the server is full: nothing of ket's failed
            level = min(level, logging.WARNING)
        trace = error if _unexpected(error) else None  # the error's own, wherever we are called
        self._log.log(level, "%s failed: %s", where, _text(error), exc_info=trace)
        return True

    def due(self, where: str, signature: str) -> bool:
        """Whether a failure of `where` that reads `signature` is to be logged now (the caller
        logs it): not when the same one was within the window, which counts it; the count of
        those not logged is said first."""
        key = (where, signature[:200])
        now = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen.since < self._window:
            seen.suppressed += 1
            return False
        if seen is not None and seen.suppressed:
            self._summary(where, seen.suppressed)
        self._seen[key] = _Seen(since=now)
        return True

    def recovered(self, where: str) -> None:
        """`where` works again: say so once, with what was not logged meanwhile."""
        mine = [key for key in self._seen if key[0] == where]
        if not mine:
            return
        suppressed = sum(self._seen.pop(key).suppressed for key in mine)
        if suppressed:
            self._summary(where, suppressed)
        self._log.info("%s works again", where)

    def _summary(self, where: str, count: int) -> None:
        self._log.warning(
            "%s failed %d more time%s in the last minute", where, count, "" if count == 1 else "s"
        )


@dataclass(eq=False, slots=True)
class _Ticking:
    """A periodic service with how it is ticked and where it stands: its failures in a row,
    and the timer of its next tick (between ticks, or while its gate is shut, it holds no
    task: a timer, or a callback on the gate)."""

    supervisor: Supervisor
    service: Service
    timeout: float
    gate: Flag | None
    patience: float
    failures: int = 0
    spread: bool = False  # the pause after the next tick is a random part of an interval
    opened: bool = False  # the next tick comes even if the gate shut meanwhile
    timer: asyncio.TimerHandle | None = None

    def due(self) -> None:
        """Its timer fired (the callback the timer holds)."""
        self.timer = None
        self.supervisor._due(self)

    def opened_now(self) -> None:
        """Its gate opened (the callback the gate holds while it is shut)."""
        self.supervisor._opened(self)


class Supervisor:
    """Runs the services and loops of one tenant worker (or of the process) until stopped."""

    def __init__(
        self,
        *,
        tenant: str | None,
        stopping: Flag,
        repeats: Repeats | None = None,
    ) -> None:
        self.tenant = tenant
        self._stopping = stopping
        self.repeats = repeats or Repeats()
        self._tasks: list[asyncio.Task[None]] = []  # a few: an empty set is 216 bytes
        self._ticking: list[_Ticking] = []  # the periodic services

    def where(self, name: str) -> str:
        """How logs name a service: `heartbeat (tenant acme)`."""
        return name if self.tenant is None else f"{name} (tenant {self.tenant})"

    def every(
        self,
        service: Service,
        *,
        at_once: bool = False,
        first_within: float = 0.0,
        timeout: float | None = None,
        gate: Flag | None = None,
        patience: float = MAX_BACKOFF_SECONDS,
    ) -> None:
        """Tick `service` every `service.interval` seconds (the first time at once, or after a
        random part of one interval; after a first tick at once, the second comes after a
        random part of one: so replicas and tenants spread out), or when its tick says. With a
        `gate`, only while the gate is set: once it opens, the first tick is an interval later;
        while it is shut the service holds no task, only a callback on the gate (a thousand
        idle tenants' heartbeats cost no tasks). `first_within`: with `at_once`, the first
        tick comes at a random moment within that many seconds (a thousand tenants starting
        together spread out). `patience`: the longest pause after failures (the heartbeat,
        which keeps leases, must not back off past its interval: the database that comes back
        must hear from it at once)."""
        bound = timeout if timeout is not None else max(service.interval, 5.0)
        ticking = _Ticking(self, service, bound, gate, patience)
        self._ticking.append(ticking)
        if gate is not None:
            self._when_open(ticking)
        elif at_once:
            # after a first tick at once, the next comes after a random part of one interval
            # too: tenants started together (and replicas) do not go on ticking at once
            ticking.spread = True
            self._after(ticking, random.uniform(0.0, first_within) if first_within > 0 else 0.0)
        else:
            self._after(ticking, service.interval * random.uniform(0.5, 1.0))

    def keep(self, name: str, loop: Callable[[], Awaitable[bool | None]]) -> None:
        """Run `loop()` for as long as the worker runs, restarting it if it ends; a loop that
        returns True has parked itself (nothing to do; a claim loop waiting for work) and holds
        no task: it keeps itself again when it has something to do."""
        self._spawn(name, self._kept(name, loop), may_end=True)

    def once(
        self,
        name: str,
        step: Callable[[], Awaitable[None]],
        *,
        timeout: float,
        failed: Callable[[Exception], None],
    ) -> None:
        """Run `step()` once; a failure, or a hang past `timeout`, is logged as any service's
        and handed to `failed`."""
        self._spawn(name, self._once(name, step, timeout, failed), may_end=True)

    async def stop(self, wait: float = STOP_WAIT_SECONDS) -> None:
        """Cancel every service and loop and wait for them, `wait` seconds at most: one that is
        still running then (a database call that ignores the cancel) is logged by name and left
        behind, so that the worker still stops."""
        self._stopping.set()
        for ticking in self._ticking:
            if ticking.timer is not None:
                ticking.timer.cancel()
                ticking.timer = None
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=wait)
            for task in done:  # their failures were logged as they happened
                if not task.cancelled():
                    task.exception()
            for task in pending:
                log.warning(
                    "%s did not stop within %g s of being cancelled; the worker stops without it",
                    task.get_name(),
                    wait,
                )
        self._tasks.clear()

    async def sleep(self, seconds: float) -> None:
        """Sleep, waking early when the worker stops: a future, a timer and a callback on the
        stop signal, no task (a thousand tenants' sleeping services would otherwise hold a
        task each just to wake at the stop)."""
        if self._stopping.is_set():
            return
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        timer = loop.call_later(seconds, _wake, woken)
        wake = functools.partial(_wake, woken)
        self._stopping.when_set(wake)
        try:
            await woken
        finally:
            timer.cancel()
            self._stopping.forget(wake)

    # -- the policy -------------------------------------------------------------------------

    def _when_open(self, ticking: _Ticking) -> None:
        """Tick `ticking`'s service once its gate opens (it is shut now, or the service is
        new): a callback on the gate until then, no task."""
        assert ticking.gate is not None
        ticking.gate.when_set(ticking.opened_now)

    def _opened(self, ticking: _Ticking) -> None:
        """The gate opened: the first tick comes an interval later, and comes even if the gate
        closed meanwhile (a gate that flickers, short jobs one at a time, must not keep the
        service from ever ticking)."""
        ticking.opened = True
        self._after(ticking, ticking.service.interval)

    def _after(self, ticking: _Ticking, seconds: float) -> None:
        """The next tick in `seconds`: a timer, no task."""
        if not self._stopping.is_set():
            loop = asyncio.get_running_loop()
            ticking.timer = loop.call_later(seconds, ticking.due)

    def _due(self, ticking: _Ticking) -> None:
        """A tick is due: in a task of its own, unless the gate is shut (then a callback on
        it waits for it to open)."""
        if self._stopping.is_set():
            return
        if ticking.opened:
            ticking.opened = False
        elif ticking.gate is not None and not ticking.gate.is_set():
            self._when_open(ticking)
            return
        self._spawn(ticking.service.name, self._tick(ticking), may_end=True)

    async def _tick(self, ticking: _Ticking) -> None:
        """One tick under the policy, then the timer of the next (after the interval, or when
        the tick says; backed off after a failure), or a callback on the gate if it shut."""
        service = ticking.service
        where = self.where(service.name)
        try:
            due = await bounded(service.tick(), ticking.timeout, service.name)
        except Exception as error:
            ticking.failures += 1
            self.repeats.failure(where, error)
            due = backoff(service.interval, ticking.failures, ceiling=ticking.patience)
        else:
            if ticking.failures:
                ticking.failures = 0
                self.repeats.recovered(where)
            if due is None:
                due = service.interval * (random.uniform(0.5, 1.0) if ticking.spread else 1.0)
            ticking.spread = False
        if ticking.gate is not None and not ticking.gate.is_set():  # shut meanwhile
            self._when_open(ticking)
            return
        self._after(ticking, due)

    async def _once(
        self,
        name: str,
        step: Callable[[], Awaitable[None]],
        timeout: float,
        failed: Callable[[Exception], None],
    ) -> None:
        try:
            await bounded(step(), timeout, name)
        except Exception as error:
            self.repeats.failure(self.where(name), error)
            failed(error)

    async def _kept(self, name: str, loop: Callable[[], Awaitable[bool | None]]) -> None:
        where = self.where(name)
        failures = 0
        while True:  # at least once: a loop such as the settler outlives the stop signal
            began = time.monotonic()
            try:
                parked = await loop()
            except Exception as error:
                if time.monotonic() - began > REPEAT_WINDOW_SECONDS:
                    failures = 0  # it ran well for a while: this is a new failure, not a streak
                failures += 1
                self.repeats.failure(where, error)
            else:
                if parked or self._stopping.is_set():
                    return
                failures += 1
                log.error("%s ended unexpectedly; restarting it", where)
            if self._stopping.is_set():
                return
            await self.sleep(backoff(1.0, failures))
            if self._stopping.is_set():
                return

    def _spawn(self, name: str, body: Awaitable[None], *, may_end: bool = False) -> None:
        task = asyncio.ensure_future(body)
        task.set_name(self.where(name))  # as stop() names one that does not stop
        task.add_done_callback(lambda done: self._ended(name, done, may_end))
        self._tasks.append(task)

    def _ended(self, name: str, task: asyncio.Task[None], may_end: bool) -> None:
        if task in self._tasks:
            self._tasks.remove(task)
        # the policy above never lets a service end (a one-off step only once it succeeded); if
        # one does anyway, say so now
        if task.cancelled() or self._stopping.is_set():
            return
        error = task.exception()
        if may_end and error is None:
            return
        log.critical(
            "%s stopped: %s",
            self.where(name),
            _text(error) if error else "it returned",
            exc_info=error,
        )


async def bounded(work: Awaitable[T], timeout: float, name: str) -> T:
    """Await `work` for at most `timeout` seconds and return its result; past that, cancel it
    without waiting for it (a call stuck on a dead connection may not even finish cancelling)
    and raise TickTimeout."""
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:  # the supervisor stops: the tick stops with it
        task.cancel()
        task.add_done_callback(_quiet)
        raise
    if not done:
        task.cancel()
        task.add_done_callback(_quiet)
        raise TickTimeout(f"{name} did not finish within {timeout:g}s; abandoned it")
    return task.result()


def backoff(interval: float, failures: int, *, ceiling: float = MAX_BACKOFF_SECONDS) -> float:
    """The pause after the `failures`-th failure in a row: doubling from `interval`, capped at
    `ceiling` (or the interval, if longer), with jitter so that replicas and tenants do not
    retry in step."""
    ceiling = max(interval, ceiling)
    exponent = min(failures - 1, 32)  # 2**32 intervals is past any cap; more would overflow
    return min(interval * 2.0**exponent, ceiling) * random.uniform(0.5, 1.0)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _quiet(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned tick's late error is not news


def _signature(error: BaseException) -> str:
    return f"{type(error).__name__}:{_text(error)[:200]}"


def _text(error: BaseException) -> str:
    try:
        return str(error) or type(error).__name__
    except Exception:
        return type(error).__name__


def _unexpected(error: BaseException) -> bool:
    """Whether a traceback helps: yes for bugs, no for ket's own errors (a database away)."""
    return not isinstance(error, KetError | TickTimeout)
