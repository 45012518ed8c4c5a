"""PostgreSQL LISTEN: one connection per database (and event loop) in a process, turning NOTIFY
into wake-ups, checking that it still works, and reconnecting by itself.

NOTIFY is scoped to a database, so a process serving several tenant databases holds one LISTEN
connection for each; store handles on the same database share it.

NOTIFY is a hint: workers also poll, so a lost wake-up delays a job but never loses it. Still, a
listener that silently stopped hearing would make every job wait for the next poll, so it checks:

- **Liveness.** A LISTEN connection whose network dropped (or whose server vanished without a
  RST) looks idle for ever. After `PROBE_EVERY_S` without a notification the listener repeats its
  `LISTEN` (a no-op round trip, like `SELECT 1`, that keeps `pg_stat_activity.query` saying
  `LISTEN ket_jobs`, so operators and tests can still find the connection); no answer within
  `PROBE_TIMEOUT_S` closes the connection and reconnects with backoff. The pool's TCP keepalives
  and timeouts (engine.POSTGRES_CONNECT_ARGS) bound the same failures at the socket level.
- **Delivery.** Behind a transaction-mode pooler (PgBouncer) LISTEN succeeds but NOTIFY never
  arrives. After each (re)connect the listener sends itself one probe notification from a separate
  connection; if it does not arrive within `NOTIFY_CHECK_S` it logs one warning and marks itself
  *deaf*: waiters then wait at most `DEAF_POLL_S`, so jobs are still picked up by tight polling.
  A later probe that arrives clears it. Payloads starting with `!` are such control messages and
  never wake a queue (no queue should be named so).
- **Nothing ends silently.** Any exception is logged (the same one at most once per
  `REPEAT_WINDOW_S`, then a count of the rest), backed off from with jitter, and retried; only
  cancellation stops the listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ket import process
from ket.connection import budget
from ket.connection.address import connect_args
from ket.connection.database_url import shown_url
from ket.connection.goodbye import close_quietly
from ket.connection.url import UrlSyntaxError, make_url
from ket.wakeup.local import Wakeups

log = logging.getLogger("ket.store.listener")
CHANNEL = "ket_jobs"  # the channel inserts NOTIFY and workers LISTEN on
T = TypeVar("T")

PROBE_EVERY_S = 30.0  # idle time after which the LISTEN connection is probed (a repeated LISTEN)
PROBE_TIMEOUT_S = 5.0  # how long that probe (and LISTEN itself) may take before the link is dead
NOTIFY_CHECK_S = 5.0  # how long the listener waits for its own probe NOTIFY after connecting
DEAF_POLL_S = 0.25  # the longest a waiter waits while NOTIFY does not arrive (poll-only mode)
CONNECT_TIMEOUT_S = 10  # libpq connect_timeout (libpq counts whole seconds, at least 2)
BACKOFF_MIN_S = 0.1  # reconnect delays double from here up to BACKOFF_MAX_S, with jitter
BACKOFF_MAX_S = 5.0
REPEAT_WINDOW_S = 60.0  # the same failure is logged at most once per window
PROBE_PREFIX = "!"  # payloads starting so are control messages, never queue names


@dataclass(frozen=True, kw_only=True)
class Timing:
    """How often and how patiently the listener checks its connection (seconds)."""

    probe_every: float = PROBE_EVERY_S
    probe_timeout: float = PROBE_TIMEOUT_S
    notify_check: float = NOTIFY_CHECK_S
    deaf_poll: float = DEAF_POLL_S
    connect_timeout: int = CONNECT_TIMEOUT_S
    backoff_min: float = BACKOFF_MIN_S
    backoff_max: float = BACKOFF_MAX_S
    repeat_window: float = REPEAT_WINDOW_S

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if value <= 0:
                raise ValueError(f"{item.name} must be positive, got {value}")

    def connect_options(self, dsn: str) -> dict[str, Any]:
        """psycopg options of the listener's connections to `dsn`: the pool's TCP keepalives and
        timeouts, this connect timeout, and the DSN's own parameters winning over both."""
        own = conninfo_to_dict(dsn)
        tcp = {**connect_args(), "connect_timeout": self.connect_timeout}
        return {"autocommit": True, **{k: v for k, v in tcp.items() if k not in own}}

    def backoff(self, failures: int) -> float:
        """The delay before reconnect number `failures`: doubling, capped, with jitter."""
        ceiling = min(self.backoff_min * 2.0 ** min(failures - 1, 30), self.backoff_max)
        return ceiling * random.uniform(0.5, 1.0)


TIMING = Timing()  # what `acquire` gives new listeners; tests replace it with shorter intervals


class ProbeTimeout(Exception):
    """The database did not answer in time: the connection is taken for dead."""


def describe(dsn: str) -> str:
    """The DSN as logs may show it: the password hidden."""
    try:
        return shown_url(make_url(dsn))
    except UrlSyntaxError:  # a key=value conninfo string
        params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
        if "password" in params:
            params["password"] = "***"
        return make_conninfo("", **params)


async def bounded(
    connection: psycopg.AsyncConnection[Any], work: Awaitable[T], timeout: float, what: str
) -> T:
    """`work` on `connection`, or ProbeTimeout after `timeout` seconds.

    asyncio.wait_for would not do: on cancellation psycopg asks the server to cancel the query,
    through the same dead network, for up to 10 s. So a hung connection is closed first, which
    makes the cancelled work end at once.
    """
    task = asyncio.ensure_future(work)
    timed_out = False
    try:
        await asyncio.wait({task}, timeout=timeout)
    finally:
        if not task.done():  # timed out, or this wait was cancelled (the worker stops)
            timed_out = True
            await connection.close()
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled():
                # "connection closed", most likely: the timeout or the stop is the news, and a
                # failure nobody retrieves is logged as a stray task's when it is collected
                task.exception()
    if timed_out:
        raise ProbeTimeout(f"{what} got no answer in {timeout:g} s")
    return task.result()


async def send_probe(dsn: str, payload: str, timing: Timing) -> None:
    """NOTIFY `payload` on the jobs channel from a short-lived connection of its own."""
    options = timing.connect_options(dsn)
    connection = await budget.connect(
        lambda: psycopg.AsyncConnection.connect(dsn, **options), kind="other", url=dsn
    )
    try:
        sent = connection.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
        await bounded(connection, sent, timing.probe_timeout, "the NOTIFY probe")
    finally:
        await close_quietly(connection)  # counted by the budget until its server process is gone


class _NotifyCheck:
    """One self-test, after a (re)connect, that a NOTIFY from elsewhere reaches our LISTEN."""

    def __init__(self, dsn: str, timing: Timing) -> None:
        loop = asyncio.get_running_loop()
        self.payload = f"{PROBE_PREFIX}probe:{uuid.uuid4().hex}"
        self.deadline = loop.time() + timing.notify_check
        self.arrived = False
        self.over = False
        # module-level lookup, so a test can make NOTIFY go astray as a pooler would
        self.sender = asyncio.ensure_future(send_probe(dsn, self.payload, timing))
        self.sender.add_done_callback(self._sent)

    def _sent(self, sender: asyncio.Future[None]) -> None:
        if not sender.cancelled() and sender.exception() is None:
            # the NOTIFY was committed just now: give it a moment to travel
            self.deadline = max(self.deadline, asyncio.get_running_loop().time() + 1.0)

    def due(self) -> float:
        """When the check wants a verdict (never again once over)."""
        return float("inf") if self.over else self.deadline

    def cancel(self) -> None:
        self.over = True
        self.sender.cancel()


class _Repeats:
    """Logs one listener's failures so that a repeating one costs a line per window, not per try."""

    def __init__(self, where: str, window: float) -> None:
        self._where = where
        self._window = window
        self._seen: dict[str, tuple[float, int]] = {}  # failure -> (logged at, not logged since)

    def log(self, level: int, key: str, message: str, *, exc_info: bool = False) -> None:
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self._window:
            self._seen[key] = (seen[0], seen[1] + 1)
            return
        if seen is not None:
            self._summary(seen[1])
        self._seen[key] = (now, 0)
        log.log(level, "job listener on %s: %s", self._where, message, exc_info=exc_info)

    def recovered(self, failures: int) -> None:
        """Listening again: log what was not logged, and say so once."""
        self._summary(sum(suppressed for _, suppressed in self._seen.values()))
        self._seen.clear()
        log.info("job listener on %s: listening again after %d failure(s)", self._where, failures)

    def _summary(self, count: int) -> None:
        if count:
            period = "minute" if self._window == 60 else f"{self._window:g} s"
            log.warning(
                "job listener on %s: %d more failure(s) in the last %s", self._where, count, period
            )


class Listener:
    """Listens on the jobs channel and wakes waiters; started on first use."""

    def __init__(self, dsn: str, wakeups: Wakeups, *, timing: Timing = TIMING) -> None:
        self._dsn = dsn
        self._wakeups = wakeups
        self._timing = timing
        self._where = describe(dsn)
        self._repeats = _Repeats(self._where, timing.repeat_window)
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._failures = 0
        self._deaf = False
        self._up = False  # a LISTEN connection is in place now
        self._polling = False  # it was just lost: the failure's line says the queues poll

    @property
    def healthy(self) -> bool:
        """Whether notifications arrive now: listening, and not found deaf."""
        return self._up and not self._deaf

    @property
    def deaf(self) -> bool:
        """Whether NOTIFY was found not to arrive (a transaction-mode pooler): poll-only."""
        return self._deaf

    def max_wait(self, timeout: float) -> float:
        """How long a waiter should wait for a wake-up: `timeout`, capped while deaf."""
        return min(timeout, self._timing.deaf_poll) if self._deaf else timeout

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
        """Listen for ever; every failure is logged, backed off from and retried."""
        while True:
            try:
                await self._listen()
            except Exception as error:  # psycopg, OS, a dead probe or a bug: never end
                self._failures += 1
                delay = self._timing.backoff(self._failures)
                expected = isinstance(error, psycopg.Error | OSError | ProbeTimeout)
                polling, self._polling = self._polling, False
                self._repeats.log(
                    logging.WARNING if expected else logging.ERROR,
                    f"{type(error).__name__}:{str(error)[:200]}",
                    f"{error_text(error)}; reconnecting in {delay:.2g} s"
                    + ("; idle queues poll until it is back" if polling else ""),
                    exc_info=not expected,
                )
                await asyncio.sleep(delay)

    async def _listen(self) -> None:
        """One LISTEN connection, served until it fails."""
        timing = self._timing
        options = timing.connect_options(self._dsn)
        connection = await budget.connect(
            lambda: psycopg.AsyncConnection.connect(self._dsn, **options),
            kind="listener",
            url=self._dsn,
        )
        try:
            listen = connection.execute(f"LISTEN {CHANNEL}")
            await bounded(connection, listen, timing.probe_timeout, "LISTEN")
            self._connected()
            check = _NotifyCheck(self._dsn, timing)
            try:
                await self._serve(connection, check)
            except Exception:
                self._lost()
                raise
            finally:
                check.cancel()
        finally:
            self._up = False
            await close_quietly(connection)

    def _lost(self) -> None:
        """The LISTEN connection failed: wake every waiter now. A queue woken by hints waits
        for one for minutes (its paced backstop); woken, it claims and, seeing the listener
        down (`healthy`), polls every `poll_max` until it is back: without this, the jobs
        enqueued meanwhile waited for the tenant's safety visit or the reconnect (issue 26)."""
        self._up = False
        self._polling = True  # said once, with the failure
        self._wakeups.notify_all()

    def _connected(self) -> None:
        if self._listening.is_set():
            # a reconnect: what was sent meanwhile is lost, so wake everyone once
            self._wakeups.notify_all()
        self._listening.set()
        self._up = True
        if self._failures:
            self._repeats.recovered(self._failures)
            self._failures = 0

    async def _serve(self, connection: psycopg.AsyncConnection[Any], check: _NotifyCheck) -> None:
        """Deliver notifications; probe the connection when it has been quiet for a while."""
        loop = asyncio.get_running_loop()
        alive_at = loop.time()
        while True:
            until = min(alive_at + self._timing.probe_every, check.due())
            # aclosing: an error in delivery must not leave the generator holding the connection
            stream = connection.notifies(timeout=max(until - loop.time(), 0))
            async with contextlib.aclosing(stream) as notifications:
                async for notification in notifications:
                    alive_at = loop.time()
                    self._deliver(notification.payload, notification.pid, check)
            if loop.time() >= check.due():
                self._judge(check)
            if loop.time() - alive_at >= self._timing.probe_every:
                probe = connection.execute(f"LISTEN {CHANNEL}")
                await bounded(connection, probe, self._timing.probe_timeout, "liveness probe")
                alive_at = loop.time()

    def _deliver(self, payload: str, pid: int, check: _NotifyCheck) -> None:
        if not payload.startswith(PROBE_PREFIX):
            self._wakeups.heard_from(payload, pid)
        elif payload == check.payload and not check.over:
            check.arrived = True
            self._judge(check)

    def _judge(self, check: _NotifyCheck) -> None:
        """Settle deafness once the probe arrived or its time is up."""
        check.over = True
        if check.arrived:
            if self._deaf:
                log.info("NOTIFY arrives on %s again: waking on notifications", self._where)
            self._deaf = False
        elif not check.sender.done() or check.sender.cancelled():
            check.sender.cancel()  # could not even send it: no verdict
        elif (error := check.sender.exception()) is not None:
            self._repeats.log(
                logging.WARNING,
                f"probe:{type(error).__name__}",
                f"could not send the NOTIFY probe: {error_text(error)}",
            )
        elif not self._deaf:
            self._deaf = True
            self._wakeups.notify_all()  # waits begun before the verdict are long: shorten them
            log.warning(
                "NOTIFY does not arrive on %s (a transaction-mode pooler?): running poll-only, "
                "polling every %g s",
                self._where,
                self._timing.deaf_poll,
            )


def error_text(error: BaseException) -> str:
    """An error's text on one line (psycopg's messages span lines), else its type's name."""
    text = " ".join(str(error).split())  # psycopg's messages span lines
    return text or type(error).__name__


class Listeners:
    """The process's listeners, one per database and event loop, with how many stores use
    each (a part of the process: ket.process)."""

    def __init__(self) -> None:
        self.shared: dict[tuple[str, int], tuple[Listener, int]] = {}


def acquire(dsn: str, wakeups: Wakeups) -> Listener:
    """The process's listener for `dsn` on the running loop (one more user of it)."""
    shared = process.current().part(Listeners).shared
    key = (dsn, id(asyncio.get_running_loop()))
    listener, users = shared.get(key, (None, 0))
    if listener is None:
        listener = Listener(dsn, wakeups, timing=TIMING)
    shared[key] = (listener, users + 1)
    return listener


async def release(dsn: str, listener: Listener) -> None:
    """One user fewer; the last one stops the listener."""
    shared = process.current().part(Listeners).shared
    key = (dsn, id(asyncio.get_running_loop()))
    current, users = shared.get(key, (None, 0))
    if current is not listener:
        await listener.stop()
        return
    if users <= 1:
        del shared[key]
        await listener.stop()
    else:
        shared[key] = (listener, users - 1)
