"""The session of a SqlStore: what every capability stands on.

Its URL and dialect, the lane (PostgreSQL: plain psycopg connections for the hot statements)
and the engine made on first use, the clock, the two ways a statement runs (`_hot` on the lane
where there is one, `_transact` on the engine), failures translated to StoreError, and the one
wake path (`_available`): a write that made jobs runnable wakes this process's waiters and,
with the control channel, the other processes' workers. It also keeps the state the wake-up
capabilities share (the listener, SQLite's inbox, the timers of `wake_in`, the claims' start
times), so that closing the session lets all of it go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Self, TypeVar

from ket.connection.address import SYNCHRONOUS, libpq_dsn, parse_url, postgres_connect_args
from ket.connection.on_demand import ENGINE_LINGER_SECONDS, OnDemandEngine
from ket.connection.pooler import listen_dsn
from ket.connection.url import DatabaseUrl
from ket.errors import StoreError
from ket.store.clock import Clock
from ket.store.failure import Translate, translated
from ket.store.sql import statement as stmt
from ket.store.sql.failure import database_error, driver_error, locked
from ket.store.sql.fetch import EngineRows, Rows
from ket.store.sql.insert import wake_queues
from ket.store.sql.lane import Lane
from ket.store.types import NewJob
from ket.wakeup import listener as listening
from ket.wakeup.local import WakePath, Wakeups, shared

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from ket.connection.url import UrlLike
    from ket.wakeup.control_channel import ControlChannel

T = TypeVar("T")

_LOCKED_RETRIES = 8
# what Lane takes from SqlStore.open's options; any other is SQLAlchemy's (see SqlStore.open)
_LANE_OPTIONS = frozenset({"pool_timeout", "connect_args", "max_overflow"})


def wakeups_of(url: DatabaseUrl) -> Wakeups:
    """The process's Wakeups of the database at `url`: every handle of one database in this
    process shares them (a store, a synchronous client); PostgreSQL adds NOTIFY for the other
    processes, SQLite a datagram to each one waiting (sqlite_wakeup)."""
    key = url.difference_update_query([SYNCHRONOUS]).render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite":
        from ket.wakeup import sqlite as sqlite_wakeup

        return sqlite_wakeup.shared_wakeups(key, url)
    return shared(key)


class SqlSession:
    """A store's connections, clock, failures and wake path, with no capability of its own
    (each capability is a subclass in this package; SqlStore puts them together)."""

    def __init__(
        self,
        url: UrlLike,
        *,
        clock: Clock | None = None,
        lane: Lane | None = None,
        pool_size: int = 5,
        engine_options: Mapping[str, Any] | None = None,
        channel: ControlChannel | None = None,
    ) -> None:
        self.url: DatabaseUrl = parse_url(url)
        self.dialect = self.url.get_backend_name()
        self._lane = lane
        self._clock = clock
        # made on first use; on PostgreSQL, where the lane runs the worker's own statements
        # and the engine serves only ctx.db, ctx.tx and the commands, let go when unused
        self._engines = OnDemandEngine(
            self.url,
            pool_size=pool_size,
            options=dict(engine_options or {}),
            linger=ENGINE_LINGER_SECONDS if lane is not None else None,
        )
        self._wakeups: Wakeups = wakeups_of(self.url)
        self._inbox: Any = None  # SQLite's sqlite_wakeup.Inbox; taken on the first wait
        # where this store LISTENs: its database, or KET_LISTEN_URL's way there (pooler.py)
        self._dsn = listen_dsn(libpq_dsn(self.url)) if self.dialect == "postgresql" else None
        self._listener: listening.Listener | None = None  # shared; taken on the first wait
        # several tenants: wake-ups go through the control database (control_channel.py)
        self._channel = channel if self.dialect == "postgresql" else None
        self._path = WakePath(self._wakeups, self._channel)
        # queue -> when its last claim here began its statement (monotonic)
        self._claimed_at: dict[str, float] = {}
        # queue -> when a limited claim here last met a concurrency limit at work (monotonic)
        self._limited: dict[str, float] = {}
        # SQLite: queue -> the store's now when a claim here last discarded its expired jobs
        self._expired_at: dict[str, datetime] = {}
        # queue -> (loop time, timer): a wake-up when the queue's next job is due
        self._due: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._closed = False
        self._failure: Translate = self._translate

    @classmethod
    async def open(
        cls,
        url: UrlLike,
        *,
        clock: Clock | None = None,
        migrate: bool = False,
        pool_size: int = 5,
        lane_size: int | None = None,
        channel: ControlChannel | None = None,
        **engine_options: Any,
    ) -> Self:
        """A store on `url` (postgresql://... or sqlite:///file); `migrate` installs the schema;
        `channel`, the tenant's part in its deployment's control channel (several tenants on
        PostgreSQL: wake-ups go through the control database, control_channel.py).

        On PostgreSQL, `lane_size` of the `pool_size` connections go to the lane and the rest to
        the engine (by default each gets `pool_size`); `pool_timeout` and `connect_args` apply
        to both. SQLite has no lane: the engine gets `pool_size`. Options the lane does not
        know are SQLAlchemy's: with one of them the engine is made at once, so that a mistake
        shows here.
        """
        parsed = parse_url(url)
        lane = None
        if parsed.get_backend_name() == "postgresql":
            if lane_size is None:
                lane_size = pool_size
            elif 0 < lane_size < pool_size:
                pool_size -= lane_size
            else:
                raise StoreError(
                    f"lane_size must be above 0 and below pool_size ({pool_size}), "
                    f"got {lane_size!r}"
                )
            with translated():  # e.g. a port list that does not parse
                lane = Lane(
                    parsed,
                    size=lane_size,
                    timeout=float(engine_options.get("pool_timeout", 30.0)),
                    connect_args=postgres_connect_args(parsed, engine_options.get("connect_args")),
                )
        store = cls(
            parsed,
            clock=clock,
            lane=lane,
            pool_size=pool_size,
            engine_options=engine_options,
            channel=channel,
        )
        if lane is None or set(engine_options) - _LANE_OPTIONS:
            store.engine  # noqa: B018 (made now: SQLite's discipline, or an option to check)
        if migrate:
            await store.migrate()
        return store

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (made, and SQLAlchemy imported, on first use)."""
        if self._closed:
            raise StoreError("the store is closed")
        with translated():  # e.g. an engine option SQLAlchemy does not know
            return self._engines.get()

    @property
    def lane(self) -> Lane | None:
        """The lane of psycopg connections for the hot operations (PostgreSQL), else None."""
        return self._lane

    def _translate(self, error: Exception) -> StoreError:
        engine = self._engines.made
        if engine is not None:
            return database_error(error, engine)
        return driver_error(error, self.url)

    async def connect(self) -> None:
        """Open a connection now, so that a long-lived client's first enqueue pays no set-up;
        StoreError if the database cannot be reached."""
        await self._hot(lambda conn: conn.tuples(stmt.CLOCK, {"now": self._now()}), single=True)

    async def uninstall(self, *, control: bool = True) -> list[str]:
        """Drop ket's tables from this database (its jobs, their history, schedules, the sent
        ledger and, with `control`, the workers' roster; the app's model tables stay); returns
        the tables dropped."""
        from ket.store.sql.migration import uninstall

        return await self._transact(
            lambda conn: conn.run_sync(lambda sync: uninstall(sync, control=control))
        )

    async def migrate(self) -> list[int]:
        """Install or upgrade ket's schema; returns the migration versions applied."""
        from ket.store.sql.migration import migrate

        return await self._transact(lambda conn: conn.run_sync(migrate))

    def _now(self) -> datetime | None:
        """This operation's now; None means the database's (PostgreSQL without a test clock)."""
        if self._clock is not None:
            return self._clock.now()
        if self.dialect == "sqlite":  # embedded: the database's clock is this machine's
            return datetime.now(UTC)
        return None

    async def _transact(
        self, body: Callable[[AsyncConnection], Awaitable[T]], *, single: bool = False
    ) -> T:
        """Run `body` in one transaction (`single`: one statement, autocommit where possible).

        SQLite lock contention is retried; any other failure is raised as a StoreError (from
        ket.store.sql.failure), its cause the original: nothing else leaves the store.
        """
        if self._closed:
            raise StoreError("the store is closed")
        delay = 0.01
        for attempt in range(_LOCKED_RETRIES):
            try:
                engine = self.engine
                autocommit = self._engines.autocommit if single else None
                if autocommit is not None:
                    async with autocommit.connect() as connection:
                        return await body(connection)
                async with engine.begin() as connection:
                    return await body(connection)
            except StoreError:
                raise
            except Exception as error:
                if not locked(error) or attempt == _LOCKED_RETRIES - 1:
                    raise self._failure(error) from error
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    async def _hot(
        self, body: Callable[[Rows], Awaitable[T]], *, single: bool = False, lasting: bool = False
    ) -> T:
        """Run a hot operation's `body` in one transaction: on the lane where there is one,
        else on the engine (as `_transact`). `lasting`: it may take long (see Lane.run)."""
        if self._lane is None:
            return await self._transact(lambda conn: body(EngineRows(conn)), single=single)
        if self._closed:
            raise StoreError("the store is closed")
        try:
            return await self._lane.run(body, single=single, lasting=lasting)
        except StoreError:
            raise
        except Exception as error:
            raise self._failure(error) from error

    async def now(self) -> datetime:
        """The store's time: the clock's, this machine's for SQLite, else the database's."""
        value = self._now()
        if value is not None:
            return value
        rows = await self._hot(lambda conn: conn.tuples(stmt.CLOCK, {"now": None}), single=True)
        result: datetime = rows[0][0]
        return result

    def _woken(self, batch: Sequence[NewJob], now: datetime | None) -> None:
        # a job due later wakes its queue too: the worker then learns when it is due
        self._available(wake_queues(batch, now), {job.queue for job in batch})

    def _available(self, woken: Collection[str], hinted: Collection[str] | None = None) -> None:
        """The one wake path: a write of this store that made jobs runnable on `woken` (or due
        later on the rest of `hinted`) committed. Waiters in this process wake now; with the
        control channel (several tenants on PostgreSQL) the workers of other processes get a
        hint; SQLite's shared wake-ups ring the other processes' sockets.

        It is here, where such a write returns to its caller, rather than in each caller
        (client, ctx.jobs, ctx.tx, a served function, the dashboard, the CLI), because a caller
        that forgot it left its jobs to the safety visit: `ket serve` and the operator's retry
        did (issue 26). Which stores hint is decided once, where a tenant's store is opened
        (control_channel.control_dsn). The synchronous client takes the same WakePath."""
        self._path.available(woken, hinted)

    def jobs_available(self, queues: Collection[str]) -> None:
        """Jobs committed where this store could not see the commit (an application's own
        connection) may run on `queues`: the workers are woken as for the store's own writes."""
        self._available(queues)

    def wake(self, queues: Collection[str]) -> None:
        """Wake these queues' waiters in this process now (they claim)."""
        self._wakeups.notify(queues)

    def wake_in(self, queue: str, delay: float) -> None:
        """A wake-up of `queue` on this process's waiters in `delay` seconds (the earliest of
        those asked for is kept)."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        at = loop.time() + delay
        current = self._due.get(queue)
        if current is not None:
            if current[0] <= at:
                return
            current[1].cancel()
        self._due[queue] = (at, loop.call_later(delay, self._now_due, queue))

    def _now_due(self, queue: str) -> None:
        self._due.pop(queue, None)
        self._wakeups.notify([queue])

    async def close(self) -> None:
        """Stop the listener and dispose of the connection pool."""
        if self._closed:
            return
        self._closed = True
        for _, timer in self._due.values():
            timer.cancel()
        self._due.clear()
        with translated(self._failure):
            if self._channel is not None:
                await self._channel.release()
            elif self._listener is not None and self._dsn is not None:
                await listening.release(self._dsn, self._listener)
            if self._lane is not None:
                await self._lane.close()
            if self._inbox is not None:
                from ket.wakeup import sqlite as sqlite_wakeup

                sqlite_wakeup.release(self._inbox)
            await self._engines.close()
