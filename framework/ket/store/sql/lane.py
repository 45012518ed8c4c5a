"""The PostgreSQL lane: the store's hot statements on psycopg connections of its own.

Through SQLAlchemy's async engine every operation costs about 0.3-0.4 ms of CPU before PostgreSQL
sees it (greenlet hops to check a connection out, to run the statement, to hand it back), which
is more than the statement itself costs the database. The lane runs the *same* statements, built
once as SQLAlchemy Core in query.py and insert.py and compiled here once to PostgreSQL text, on
plain psycopg connections, prepared on the server from a statement's second run on a connection:
about 0.08 ms per operation. (Not from the first: with many tenants a connection often serves a
tenant for a few statements only, and preparing costs a round trip of its own.)

The statements' PostgreSQL text is generated ahead of time (postgres_text.py, see statement.py),
so the lane imports no SQLAlchemy: a worker whose handlers use neither `ctx.db` nor `ctx.tx`
never loads it. The lane serves everything a worker runs (claims, settlements, heartbeats,
rescues, inserts, schedule ticks, pruning, VACUUM, the sent ledger, the clock, the job stats
behind metrics); the rest (model rows, a caller's transaction, operator commands, migrations)
uses the engine, made on first use.

A lane's pool is small and lazy: it opens a connection when no idle one is left and fewer than
`size` are open, drops one that broke, and makes a caller wait at most `timeout` seconds for a
free one.

While the process's connection budget is spent (a worker serving many tenants), a lane whose
own connection is busy with a short statement waits for that one (up to OWN_WAIT_SECONDS)
rather than opening another: a new connection would cost a server process started, and another
tenant's idle connection closed to make room, where the wait costs a statement's few
milliseconds. After a tick, a tenant's sweep, the claim of its tick job, the question of when
its next job is due and the settlement would otherwise each open a connection of their own.
A connection held by a lasting statement (VACUUM, pruning) is not waited for. But once the
caller the budget serves next has waited FAIR_WAIT_SECONDS (budget.owed), a connection that
comes back is closed for it rather than handed to this lane's next caller: a tenant that is
never idle would otherwise keep its connections, and the others' work would wait for good.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.rows import namedtuple_row

from ket.connection import budget, pooler
from ket.connection.address import psycopg_params
from ket.connection.goodbye import close_quietly
from ket.connection.url import DatabaseUrl
from ket.errors import StoreError
from ket.store.sql.postgres_text import TEXT
from ket.store.sql.statement import Compiled, Statement
from ket.store.waiting import in_hand

T = TypeVar("T")
# A statement is prepared on a connection once it ran there this many times before (psycopg's
# prepare_threshold): the second run prepares it, the later ones use it.
PREPARE_AFTER = 1
# With the budget spent, how long a caller waits for one of its lane's busy connections before
# it opens one of its own anyway (a statement that takes longer than this is not a short one).
OWN_WAIT_SECONDS = 1.0


def text_of(statement: Statement) -> Compiled:
    """The generated PostgreSQL text of `statement`."""
    return TEXT[statement.key]


class LaneConnection:
    """One checked-out lane connection: statements run prepared once they ran before on it
    (PREPARE_AFTER), rows come back as named tuples."""

    dialect = "postgresql"

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.raw = connection

    async def rows(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row `statement` returns (none for a statement without RETURNING)."""
        sql = text_of(statement)
        async with self.raw.cursor(row_factory=namedtuple_row) as cursor:
            await cursor.execute(sql.text, sql.params(params))
            return await cursor.fetchall() if cursor.description is not None else []

    async def tuples(self, statement: Statement, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row as a plain tuple, in the statement's column order (the claim's hot path)."""
        sql = text_of(statement)
        async with self.raw.cursor() as cursor:
            await cursor.execute(sql.text, sql.params(params))
            return await cursor.fetchall()

    async def many(self, statement: Statement, params: Sequence[dict[str, Any]]) -> list[Any]:
        """Run `statement` once per parameter set (pipelined); the rows of each, in order."""
        sql = text_of(statement)
        async with self.raw.cursor(row_factory=namedtuple_row) as cursor:
            await cursor.executemany(
                sql.text, [sql.params(p) for p in params], returning=sql.returning
            )
            if not sql.returning:
                return []
            found: list[Any] = []
            while True:
                found.extend(await cursor.fetchall())
                if not cursor.nextset():
                    return found


class Lane:
    """A small pool of psycopg connections to one PostgreSQL database."""

    def __init__(
        self, url: DatabaseUrl, *, size: int, timeout: float, connect_args: dict[str, Any]
    ) -> None:
        # the URL's parts as SQLAlchemy's psycopg dialect passes them, so that both agree
        self._connect_args = {**psycopg_params(url), **connect_args}
        self.size = size
        self.timeout = timeout
        # idle connections with the monotonic time each went idle, the oldest first
        # lists, not deques (short ones; a deque is 600 bytes empty, and a worker holds a lane
        # per tenant)
        self._idle: list[tuple[psycopg.AsyncConnection[Any], float]] = []
        self._open = 0  # connections open or being opened
        self._lasting = 0  # of those, held by a lasting statement (see the module's text)
        self._waiters: list[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = []
        self._closed = False
        # broken connections being closed (a list: an empty set is 216 bytes, a lane a tenant)
        self._closing: list[asyncio.Task[None]] = []
        # the process's connection budget (budget.py), if any: each connection takes part of
        # it, and idle ones close after its idle time, or sooner when others need the room
        self._budget = budget.current(url)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[LaneConnection]:
        """A connection in autocommit mode for the block; returned to the pool afterwards."""
        raw = await self._acquire()
        in_hand()
        try:
            yield LaneConnection(raw)
        finally:
            self._release(raw)

    async def run(
        self,
        body: Callable[[LaneConnection], Awaitable[T]],
        *,
        single: bool = False,
        lasting: bool = False,
    ) -> T:
        """`body` on one connection, in one transaction (`single`: one statement, autocommit).
        `lasting`: it may take long (VACUUM, pruning): nobody waits for its connection."""
        # the connection() block written out: a single enqueue is this and one statement, and
        # an async context manager's generator costs as much as the rest of this method
        raw = await self._acquire()
        in_hand()
        self._lasting += lasting
        try:
            if single:
                return await body(LaneConnection(raw))
            async with raw.transaction():
                return await body(LaneConnection(raw))
        finally:
            self._lasting -= lasting
            self._release(raw)

    async def close(self) -> None:
        """Close the idle connections; those in use are closed when they come back."""
        self._closed = True
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
        idle, self._idle = [raw for raw, _ in self._idle], []
        self._open -= len(idle)
        await asyncio.gather(*(close_quietly(raw) for raw in idle))
        if idle and self._budget is not None:
            self._budget.released()

    def idle_since(self) -> float | None:
        """When the connection idle longest went idle (monotonic); None with none idle."""
        return self._idle[0][1] if self._idle else None

    async def shed(self, older_than: float | None = None) -> int:
        """Close the idle connections that went idle before `older_than`, else the one idle
        longest; how many (the budget asks, for room or because they sat idle too long)."""
        closing: list[psycopg.AsyncConnection[Any]] = []
        while self._idle and (
            self._idle[0][1] <= older_than if older_than is not None else not closing
        ):
            closing.append(self._idle.pop(0)[0])
        self._open -= len(closing)
        for raw in closing:
            await close_quietly(raw)
        if closing and self._budget is not None:
            self._budget.released()
        return len(closing)

    async def _acquire(self, *, share: bool = True) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise StoreError("the store is closed")
        while self._idle:
            raw, _ = self._idle.pop()  # the most recently used: its statements are prepared
            if not raw.closed:
                return raw
            self._open -= 1
        if self._open < self.size:
            if share and self._open > self._lasting and self._spent():
                # one of ours is on a short statement, or waits for the budget's room: take it
                # when it comes back. Not for long: this may be a heartbeat or a settlement,
                # which the budget would serve before the sweep whose connection it waits for.
                try:
                    handed = await self._handed(OWN_WAIT_SECONDS)
                except TimeoutError:
                    handed = None
                return handed if handed is not None else await self._acquire(share=False)
            self._open += 1
            try:
                return await self._connect()
            except BaseException:
                self._open -= 1
                self._wake_one()
                raise
        return await self._wait()

    def _spent(self) -> bool:
        return self._budget is not None and self._budget.spent()

    async def _wait(self) -> psycopg.AsyncConnection[Any]:
        try:
            raw = await self._handed(self.timeout)
        except TimeoutError as error:
            raise StoreError(
                f"no database connection free within {self.timeout:g} s "
                f"(pool of {self.size}): every connection is in use; hold them for less "
                "time, or raise pool_size"
            ) from error
        if raw is None:  # a slot came free, or the lane closed
            return await self._acquire()
        return raw

    async def _handed(self, timeout: float) -> psycopg.AsyncConnection[Any] | None:
        """The connection another caller hands back next, within `timeout` (else
        TimeoutError); None when a slot came free instead, or the lane closed."""
        waiter: asyncio.Future[psycopg.AsyncConnection[Any] | None]
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            # not asyncio.wait_for: in Python 3.11 it returns the result when a cancel meets it,
            # and the cancelled caller (a claim loop at the worker's stop) went on
            async with asyncio.timeout(timeout):
                return await waiter
        except BaseException:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled():  # handed over as we gave up
                given = waiter.result()
                if given is not None:
                    self._release(given)
                else:
                    self._wake_one()
            raise

    def _release(self, raw: psycopg.AsyncConnection[Any]) -> None:
        healthy = not raw.closed and raw.info.transaction_status == TransactionStatus.IDLE
        if not healthy or self._closed:
            if raw.closed:  # the connection was lost: the idle ones likely were too (a restart)
                stale = [raw, *(idle for idle, _ in self._idle)]
                self._idle.clear()
            else:
                stale = [raw]
            self._open -= len(stale)
            for dropped in stale:
                self._in_background(close_quietly(dropped))
                self._wake_one()
            return
        if self._budget is not None and self._budget.owed():
            # another tenant has waited for room long enough: its turn, not our next caller's
            # (who asks the budget for room of its own, in line). Whether or not a caller of
            # ours waits here: enqueues gathered behind this one wait in the store's Gather,
            # not here, and the group that takes them would take this connection back at once
            self._open -= 1
            self._in_background(self._give_up(raw))
            return
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(raw)
                return
        self._idle.append((raw, time.monotonic()))
        if self._budget is not None:
            self._budget.released(self)  # one idle here: a caller short of room may take it

    def _in_background(self, closing: Coroutine[Any, Any, None]) -> None:
        """Close a connection without waiting for it (kept until done, so it is not lost)."""
        task = asyncio.ensure_future(closing)
        self._closing.append(task)
        task.add_done_callback(self._closing.remove)

    async def _give_up(self, raw: psycopg.AsyncConnection[Any]) -> None:
        """Close `raw` for the budget's next caller, then let our own next caller ask."""
        try:
            await close_quietly(raw)
        finally:
            if self._budget is not None:
                self._budget.released()
            self._wake_one()

    def _wake_one(self) -> None:
        """A slot came free: let the first waiter open a connection of its own."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        raw = await (
            # the connections it has besides this one: a lane with none waits ahead of more
            self._budget.connect(self._open_one, kind="lane", holding=self._open - 1)
            if self._budget is not None
            else self._open_one()
        )
        try:
            # instants come back in UTC, as the engine's Instant type gives them; and behind a
            # pooler nothing is prepared, nor a pool that refuses transactions served (pooler.py)
            found = await raw.execute(pooler.FIRST_STATEMENT, prepare=False)
            row = await found.fetchone()
            if row is not None and pooler.pooled(raw, int(row[0])):
                await pooler.check_transactions(raw, pooler.where(raw))
        except BaseException:
            await close_quietly(raw)
            raise
        return raw

    async def _open_one(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(
            autocommit=True, prepare_threshold=PREPARE_AFTER, **self._connect_args
        )
