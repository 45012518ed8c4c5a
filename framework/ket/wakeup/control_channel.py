"""One wake-up channel per PostgreSQL server: hints `tenant:queue` on the control database.

NOTIFY is scoped to one database, so hearing every tenant's enqueues directly would take one
LISTEN connection per tenant database in every worker. Instead, once the deployment has a
registry (several tenants), whoever enqueues also sends, after the commit, one NOTIFY on the
control database (the registry's) naming the tenant and the queue; each worker process holds one
LISTEN there (the usual `Listener`, with its liveness and delivery checks) and routes each hint
to that tenant's waiters. A single-tenant app has no registry: its tenant database is the control
database, and the trigger's NOTIFY there is the channel, as before.

    channel = ControlChannel(control_dsn, "acme")   # given to SqlStore.open(..., channel=...)
    channel.sent({"default"})                      # after a commit: a hint, batched and sent
    listener = channel.listen(wakeups)             # the process's LISTEN on the control database

A worker's own enqueues (a schedule's tick, `ctx.jobs`, a retry due now) wake its queue in the
process at once; the hint it sends for other workers then comes back to it too. That echo is
known by the server process that sent it (a notification carries the sender's PID, and the
process sends its hints on one connection of its own) and is dropped for the waiters already
woken, so one job is not claimed for twice. A hint from anyone else always wakes: one that came
while an echo was awaited was once taken for it, and its job waited for the next visit.

Hints stay hints: one lost (the control database down, a worker restarting) delays a job until
the queue's next poll; it never loses it. Sending never blocks the enqueue that caused it: hints
are gathered and sent by one task per control database, a few per statement, and a send that
fails is logged (once a minute at most) and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

import psycopg

from ket import process
from ket.connection import budget
from ket.connection.address import libpq_dsn, parse_url
from ket.connection.goodbye import close_quietly
from ket.connection.pooler import listen_dsn
from ket.connection.url import is_postgres
from ket.wakeup import listener as listening
from ket.wakeup.listener import CHANNEL
from ket.wakeup.local import Wakeups

log = logging.getLogger("ket.store.listener")

SEPARATOR = ":"  # never in a tenant name (ket.store.tenant), so `tenant:queue` splits at the first
SAY_EVERY_SECONDS = 60.0
SEND = f"SELECT pg_notify('{CHANNEL}', hint) FROM unnest(%s::text[]) AS hint"
# How long a store that closes waits for its hints to go out (a client closed right after an
# enqueue, at the end of `asyncio.run`, would otherwise have its hint cancelled unsent).
FLUSH_SECONDS = 1.0
# How long the hint connection stays open with no hint to send.
IDLE_SECONDS = 30.0


def hint(tenant: str, queue: str) -> str:
    """The NOTIFY payload that wakes `queue` of `tenant`."""
    return f"{tenant}{SEPARATOR}{queue}"


class Router(Wakeups):
    """The control listener's wake-ups: each hint goes to its tenant's waiters (nobody waits
    on the router itself)."""

    def __init__(self) -> None:
        super().__init__()
        self._routes: dict[str, list[Wakeups]] = {}
        # (sending server process, hint) -> the waiters each send of it woke here already,
        # oldest first: the echoes this process still awaits of its own hints
        self._echoes: dict[tuple[int, str], deque[frozenset[Wakeups]]] = {}

    def expect(self, pid: int, payload: str, woken: frozenset[Wakeups]) -> None:
        """This process sends `payload` from server process `pid` after waking `woken` itself:
        its echo skips them."""
        self._echoes.setdefault((pid, payload), deque()).append(woken)

    def forget(self, pid: int) -> None:
        """The connection of server process `pid` is gone: no echo of it is awaited any more."""
        for key in [key for key in self._echoes if key[0] == pid]:
            del self._echoes[key]

    def _woken_already(self, pid: int, payload: str) -> frozenset[Wakeups]:
        echoes = self._echoes.get((pid, payload))
        if not echoes:
            return frozenset()
        woken = echoes.popleft()
        if not echoes:
            del self._echoes[(pid, payload)]
        return woken

    def add(self, tenant: str, wakeups: Wakeups) -> None:
        self._routes.setdefault(tenant, []).append(wakeups)

    def remove(self, tenant: str, wakeups: Wakeups) -> None:
        routes = self._routes.get(tenant, [])
        if wakeups in routes:
            routes.remove(wakeups)
        if not routes:
            self._routes.pop(tenant, None)

    def heard_from(self, payload: str, pid: int) -> None:
        """A hint that server process `pid` sent: to its tenant's waiters, but for those an
        echo of this process's own already woke."""
        tenant, separator, queue = payload.partition(SEPARATOR)
        if separator:
            woken = self._woken_already(pid, payload)
            for wakeups in self._routes.get(tenant, ()):
                if woken:  # an echo, for this process's other stores of the tenant
                    if wakeups not in woken:
                        wakeups.notify([queue])
                else:  # someone's enqueue: its claim goes before the sweeps and ticks
                    wakeups.notify_prompt([queue])

    def notify(self, payloads: Iterable[str]) -> None:
        for payload in payloads:
            self.heard_from(payload, 0)

    def notify_all(self) -> None:
        """After a reconnect, when hints may have been missed: every tenant looks."""
        self._echoes.clear()
        for routes in list(self._routes.values()):
            for wakeups in routes:
                wakeups.notify_all()


class _Dropped:
    """Hints that could not be sent: said once a minute at most, with how many were dropped."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._said_at = -SAY_EVERY_SECONDS
        self._count = 0

    def said(self, error: Exception, count: int) -> None:
        self._count += count
        now = time.monotonic()
        if now - self._said_at < SAY_EVERY_SECONDS:
            return
        log.warning(
            "could not send %d wake-up hint(s) to the control database %s: %s; the workers "
            "find those jobs at their next poll",
            self._count,
            listening.describe(self._dsn),
            listening.error_text(error),
        )
        self._said_at, self._count = now, 0


class _Sender:
    """Gathers the hints of one control database and sends them on a connection of its own.

    One task sends them and owns the connection: it sends what is gathered, waits for more,
    and closes the connection once no hint came for IDLE_SECONDS, or when it is cancelled: at
    `close()`, or when `asyncio.run` ends its loop (which cancels the tasks left and lets them
    finish). So a connection never outlives its event loop unclosed, and an application that
    stopped enqueuing holds none on the control database."""

    def __init__(self, dsn: str, key: tuple[str, int], hinting: Hinting) -> None:
        self._dsn = dsn
        self._key = key
        self._hinting = hinting  # the process's senders and routers: this one is among them
        # hint -> the waiters of this process that woke for it already
        self._pending: dict[str, set[Wakeups]] = {}
        self._task: asyncio.Task[None] | None = None
        self._more: asyncio.Future[None] | None = None  # set when hints wait to be sent
        self._sent: list[asyncio.Future[None]] = []  # `flushed` callers: nothing is pending
        self._sending = False  # a batch is on its way
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._pid = 0  # its server process: a notification from it is this process's echo
        self._dropped = _Dropped(dsn)

    def send(self, hints: Iterable[str], woken: Wakeups | None = None) -> None:
        """Send `hints` soon; `woken`: this process's waiters that woke for them already."""
        for one in hints:
            already = self._pending.setdefault(one, set())
            if woken is not None:
                already.add(woken)
        if not self._pending:
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ket-hints")
        elif self._more is not None and not self._more.done():
            self._more.set_result(None)

    async def _run(self) -> None:
        try:
            while True:
                await self._flush()
                for waiter in self._sent:
                    if not waiter.done():
                        waiter.set_result(None)
                self._sent.clear()
                self._more = asyncio.get_running_loop().create_future()
                try:
                    await asyncio.wait_for(self._more, IDLE_SECONDS)
                except TimeoutError:
                    if not self._pending:
                        break
        finally:
            # idle or cancelled: hints sent from now on go to a new sender
            if self._hinting.senders.get(self._key) is self:
                del self._hinting.senders[self._key]
            await self._drop()

    async def _flush(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, {}
            batch = sorted(pending)
            self._sending = True
            try:
                connection = await self._connect()
                router = self._hinting.routers.get(self._key)
                if router is not None:  # one NOTIFY per distinct hint: one echo each
                    for one in batch:
                        if pending[one]:
                            router.expect(self._pid, one, frozenset(pending[one]))
                await connection.execute(SEND, (batch,), prepare=False)  # pooler.py
            except Exception as error:  # a hint is not worth more than a log line
                await self._drop()  # and the echoes its connection would have sent
                self._dropped.said(error, len(batch))
                continue
            finally:
                self._sending = False

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        connection = self._connection
        if connection is None or connection.closed:
            self._forget_echoes()
            options = listening.TIMING.connect_options(self._dsn)
            connection = self._connection = await budget.connect(
                lambda: psycopg.AsyncConnection.connect(self._dsn, **options),
                kind="other",
                url=self._dsn,
            )
            self._pid = connection.info.backend_pid
        return connection

    def _forget_echoes(self) -> None:
        """The connection is gone: the echoes it would have sent are awaited no more."""
        router = self._hinting.routers.get(self._key)
        if router is not None and self._pid:
            router.forget(self._pid)
        self._pid = 0

    async def _drop(self) -> None:
        connection, self._connection = self._connection, None
        self._forget_echoes()
        if connection is not None:  # counted by the budget until its server process is gone
            await close_quietly(connection)

    async def flushed(self) -> None:
        """Return once what was gathered so far is sent (or FLUSH_SECONDS passed)."""
        if not (self._pending or self._sending) or self._task is None or self._task.done():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._sent.append(waiter)
        await asyncio.wait([waiter], timeout=FLUSH_SECONDS)

    async def close(self) -> None:
        await self.flushed()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        await self._drop()


class Hinting:
    """The process's hint senders and routers, one of each per control database and event loop
    (a part of the process: ket.process)."""

    def __init__(self) -> None:
        self.senders: dict[tuple[str, int], _Sender] = {}
        self.routers: dict[tuple[str, int], Router] = {}


def _hinting() -> Hinting:
    return process.current().part(Hinting)


class ControlChannel:
    """A tenant store's part in the control channel of its deployment."""

    def __init__(self, dsn: str, tenant: str) -> None:
        self.dsn = dsn
        self.tenant = tenant
        self._listener: listening.Listener | None = None
        self._wakeups: Wakeups | None = None

    def sent(self, queues: Collection[str], woken: Collection[str] = ()) -> None:
        """Jobs were committed that `queues` may run now (or later): hint the workers (never
        blocks). `woken`: those of them this store woke in the process already."""
        if not queues:
            return
        key = (self.dsn, id(asyncio.get_running_loop()))
        hinting = _hinting()
        sender = hinting.senders.get(key)
        if sender is None:
            sender = hinting.senders[key] = _Sender(self.dsn, key, hinting)
        mine = self._wakeups if self._listener is not None else None  # routed here: an echo
        if mine is None or not woken:
            sender.send(hint(self.tenant, queue) for queue in queues)
            return
        sender.send((hint(self.tenant, q) for q in queues if q in woken), mine)
        sender.send(hint(self.tenant, q) for q in queues if q not in woken)

    def listen(self, wakeups: Wakeups) -> listening.Listener:
        """The process's LISTEN on the control database, routing this tenant's hints to
        `wakeups` (taken once; `release` gives it back)."""
        if self._listener is None:
            key = (self.dsn, id(asyncio.get_running_loop()))
            routers = _hinting().routers
            router = routers.get(key)
            if router is None:
                router = routers[key] = Router()
            router.add(self.tenant, wakeups)
            self._wakeups = wakeups
            # KET_LISTEN_URL's way to the control database, when set (pooler.py)
            self._listener = listening.acquire(listen_dsn(self.dsn), router)
        return self._listener

    async def release(self) -> None:
        """This store is closing: the hints gathered so far are sent, then its routes and its
        use of the listener go."""
        key = (self.dsn, id(asyncio.get_running_loop()))
        hinting = _hinting()
        sender = hinting.senders.get(key)
        if sender is not None:
            await sender.flushed()
        listener, self._listener = self._listener, None
        if listener is None:
            return
        router = hinting.routers.get(key)
        if router is not None and self._wakeups is not None:
            router.remove(self.tenant, self._wakeups)
        await listening.release(listen_dsn(self.dsn), listener)


class SyncHints:
    """The hints of a synchronous client: sent on a connection of its own, after each commit.

    Threads that commit while a hint is on its way do not queue behind it on the connection:
    their hints join the next send, which the sending thread makes once its own is done (each
    send is a commit that NOTIFYs, and those take PostgreSQL's one notification lock in turn:
    sixteen threads sending their own would send one after another). A hint is never sent
    before its commit: it is only gathered once the commit returned."""

    def __init__(self, dsn: str, tenant: str) -> None:
        self.dsn = dsn
        self.tenant = tenant
        self._connection: psycopg.Connection[Any] | None = None
        self._dropped = _Dropped(dsn)
        self._lock = threading.Lock()
        self._gathered: set[str] = set()  # hints waiting for the next send
        self._sending = False  # a thread is sending: it sends what gathers meanwhile too

    def connect(self) -> None:
        """Open the connection now, so that the first hint pays no set-up; one that cannot be
        opened is tried again at the first hint, which says why it failed."""
        try:
            self._connected()
        except Exception:
            self.close()

    def _connected(self) -> psycopg.Connection[Any]:
        connection = self._connection
        if connection is None or connection.closed:
            options = listening.TIMING.connect_options(self.dsn)
            connection = self._connection = psycopg.Connection.connect(self.dsn, **options)
        return connection

    def sent(self, queues: Collection[str], woken: Collection[str] = ()) -> None:
        """As ControlChannel.sent, in the caller's thread (or in the thread sending already);
        a failure is logged, not raised. (`woken` changes nothing: a synchronous client routes
        no hints in its process.)"""
        if not queues:
            return
        with self._lock:
            self._gathered.update(hint(self.tenant, queue) for queue in queues)
            if self._sending:
                return
            self._sending = True
        try:
            while True:
                with self._lock:
                    hints, self._gathered = sorted(self._gathered), set()
                    if not hints:
                        self._sending = False
                        return
                try:
                    connection = self._connected()
                    connection.execute(SEND, (hints,), prepare=False)  # pooler.py
                except Exception as error:
                    self.close()
                    self._dropped.said(error, len(hints))
        except BaseException:  # interrupted: the next commit's thread sends what is left
            with self._lock:
                self._sending = False
            raise

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                return


def control_dsn(url: str, registry: str, *, registered: bool) -> str | None:
    """The control database a store of a tenant database at `url` hints the workers on: the
    registry's (`registry`), once it lists tenants (`registered`) and both are on PostgreSQL,
    since the workers then LISTEN there and not on the tenant databases; else None (a single
    tenant's own database NOTIFYs its workers, and SQLite rings their sockets).

    The clients and the commands that retry, rerun, run a schedule now or call a function
    decide it here; `ket worker` and `ket serve` apply the same rule to each tenant they open
    (ControlChannels). A store opened without its channel made jobs no worker heard of until
    the tenant's safety visit (issue 26)."""
    if registered and is_postgres(url) and is_postgres(registry):
        return libpq_dsn(parse_url(registry))
    return None


class ControlChannels:
    """The control channel of one deployment's tenants, as `ket worker` gives it to its fleet."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def for_tenant(self, tenant: str) -> ControlChannel:
        return ControlChannel(self.dsn, tenant)

    async def close(self) -> None:
        await close_senders()


async def close_senders() -> None:
    """Send what is pending and close the hint connections of this event loop."""
    loop = id(asyncio.get_running_loop())
    senders = _hinting().senders
    for key in [k for k in senders if k[1] == loop]:
        await senders.pop(key).close()
