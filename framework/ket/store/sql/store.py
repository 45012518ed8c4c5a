"""SqlStore: the job store on PostgreSQL (psycopg 3, async) and SQLite (aiosqlite).

On PostgreSQL every operation a worker runs goes through the lane (lane.py: plain psycopg
connections running the statements' generated text), and the SQLAlchemy engine is made on first
use (model rows, a caller's transaction, operator commands, migrations): a worker whose handlers
use neither `ctx.db` nor `ctx.tx` never imports SQLAlchemy. SQLite has no lane: its engine is
made at open.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from ket.connection import budget
from ket.connection.address import SYNCHRONOUS, libpq_dsn, parse_url, postgres_connect_args
from ket.connection.on_demand import ENGINE_LINGER_SECONDS, OnDemandEngine
from ket.connection.pooler import listen_dsn
from ket.connection.url import DatabaseUrl
from ket.errors import StoreError
from ket.store import validate
from ket.store.clock import Clock
from ket.store.failure import Translate, translated
from ket.store.sql import bulk, command, schedule, stats
from ket.store.sql import statement as stmt
from ket.store.sql.app_connection import (
    AppConnection,
    AsyncAppConnection,
    app_connection,
    async_app_connection,
)
from ket.store.sql.failure import database_error, driver_error, from_database, locked
from ket.store.sql.fetch import EngineRows, Rows, fetch_all
from ket.store.sql.insert import insert_plan, one_statement, run_plan, run_sync, wake_queues
from ket.store.sql.lane import Lane, LaneConnection
from ket.store.sql.now import time_params
from ket.store.sql.vacuum import vacuum_jobs
from ket.store.types import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    BulkApplied,
    BulkBatch,
    BulkCount,
    ClaimedJob,
    DashboardSession,
    ErrorInfo,
    Fire,
    Heartbeat,
    HeartbeatResult,
    Inserted,
    JobClaim,
    JobFilter,
    JobId,
    JobQuery,
    JobRecord,
    JobStats,
    Look,
    ModelTable,
    NewJob,
    Prune,
    Reran,
    Rerun,
    Rescued,
    ScheduleState,
    Settle,
    SettleResult,
    StateChange,
    TickClaim,
    TickResult,
    Vacuum,
    Vacuumed,
    Where,
)
from ket.store.watch import JobWatch
from ket.wakeup import listener as listening
from ket.wakeup.local import WakePath, Wakeups, shared

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from ket.connection.url import UrlLike
    from ket.store.record import RecordModel
    from ket.store.sql.records import RecordCall, SqlRecords
    from ket.wakeup.control_channel import ControlChannel

T = TypeVar("T")
_LOCKED_RETRIES = 8
_KEY_RACES = 3  # times a bulk batch runs when a racing insert takes a unique key it retries
# `ket jobs stats` names the transactions open on the tenant database for longer than this
LONG_TRANSACTION_SECONDS = 60.0
# The longest a wait for work waits for LISTEN to be in place (after that it waits on: the
# listener's verdict, up or deaf, wakes every waiter).
LISTEN_READY_SECONDS = 30.0
# outcomes that, with no delay, make the job claimable at once: its queue's waiters are woken
_RUNNABLE_AGAIN = frozenset({"retryable", "snoozed"})


def wakeups_of(url: DatabaseUrl) -> Wakeups:
    """The process's Wakeups of the database at `url`: every handle of one database in this
    process shares them (a store, a synchronous client); PostgreSQL adds NOTIFY for the other
    processes, SQLite a datagram to each one waiting (sqlite_wakeup)."""
    key = url.difference_update_query([SYNCHRONOUS]).render_as_string(hide_password=True)
    if url.get_backend_name() == "sqlite":
        from ket.wakeup import sqlite as sqlite_wakeup

        return sqlite_wakeup.shared_wakeups(key, url)
    return shared(key)


class SqlStore:
    """Jobs in a PostgreSQL or SQLite database.

    Open one with `await SqlStore.open(url)`; `clock` replaces the database's time (tests). On
    PostgreSQL the operations of a worker run on a lane of plain psycopg connections (lane.py);
    the SQLAlchemy engine serves the rest and is made on first use.
    """

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
    ) -> SqlStore:
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

    # -- time and transactions --------------------------------------------------------------

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

    # -- insert -----------------------------------------------------------------------------

    async def job_insert(self, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in one transaction; unique keys coalesce with their active holder."""
        payloads = validate.encode_payloads(batch)
        if not batch:
            return []
        now = self._now()
        # one statement needs no transaction of its own; several do
        single = one_statement(self.dialect, batch)
        inserted = await self._hot(
            lambda rows: run_plan(rows, insert_plan(self.dialect, now, batch, payloads)),
            single=single,
        )
        self._woken(batch, now)
        return inserted

    def job_insert_sync(self, connection: object, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs on an application's own synchronous connection, in its transaction
        (any connection `insert_on` takes)."""
        return insert_on(connection, batch, now=self._clock.now() if self._clock else None)

    async def job_insert_on(self, connection: object, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs on an application's own asyncio connection, in its transaction: a
        SQLAlchemy AsyncConnection or AsyncSession, a psycopg 3 AsyncConnection
        (app_connection.py); ConnectionRejected for anything else."""
        app = (
            connection
            if isinstance(connection, AsyncAppConnection)
            else await async_app_connection(connection)
        )
        payloads = validate.encode_payloads(batch)
        if not batch:
            return []
        dialect = app.rows.dialect
        now = self._clock.now() if self._clock else None
        if now is None and dialect == "sqlite":
            now = datetime.now(UTC)
        plan = insert_plan(dialect, now, batch, payloads, write_locked=False)
        with translated(app.failure):
            async with app.transaction():
                inserted = await run_plan(app.rows, plan)
        if app.on_commit is not None:
            # an AsyncSession: the wake-ups once it commits; on another connection ket cannot
            # see the commit (PostgreSQL's trigger still NOTIFYs at commit, one tenant)
            app.on_commit(lambda: self._woken(batch, now))
        return inserted

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

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqlTransaction]:
        """A transaction for the caller's statements and job inserts; wake-ups after commit.

        Failing to begin, commit or roll back raises StoreError, and so does a database error
        raised in the block (its transaction is lost); the block's other exceptions pass as
        they are.
        """
        if self._closed:
            raise StoreError("the store is closed")
        tx = SqlTransaction(self)
        in_block = False
        try:
            async with self.engine.begin() as connection:
                tx.connection = connection
                in_block = True
                yield tx
                in_block = False
        except StoreError:
            raise
        except Exception as error:
            if in_block and not from_database(error):
                raise
            raise self._failure(error) from error
        finally:
            tx.connection = None
        for batch, now in tx.pending:
            self._woken(batch, now)

    # -- claim and settle -------------------------------------------------------------------

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        """Claim due jobs in priority, run-at, id order under a lease and a new fence."""
        validate.check_claim(claim)
        params = time_params(self._now(), lease=claim.lease_seconds)
        params.update(p_queue=claim.queue, limit=claim.limit, p_worker_id=claim.worker_id)
        self._wakeups.woken_at.setdefault(claim.queue, 0.0)  # from now on wake-ups are timed
        began = [0.0]

        async def statement(rows: Rows) -> list[Any]:
            began[0] = time.monotonic()  # the claim sees every job committed before this
            return await rows.tuples(stmt.CLAIM, params)

        if self._channel is None:  # one tenant: its connections are its own
            rows = await self._hot(statement, single=True)
        else:
            rows = await self._claim_hinted(claim.queue, statement)
        self._claimed_at[claim.queue] = began[0]
        claimed = [stmt.claimed_job(row) for row in rows]
        return sorted(claimed, key=lambda job: (job.priority, job.run_at, job.id))

    async def _claim_hinted(
        self, queue: str, statement: Callable[[Rows], Awaitable[list[Any]]]
    ) -> list[Any]:
        """A claim among many tenants: for a job someone enqueued (the control channel's hint),
        its wait for a connection goes first (the budget's prompt tier), and such a hint while
        it waits hurries it there."""
        prompt = self._wakeups.take_prompt(queue)
        ticket = budget.Ticket(budget.PROMPT if prompt else budget.NORMAL)
        with (
            self._wakeups.claiming(queue, lambda: budget.promote(ticket, self.url)),
            budget.waiting_as(ticket),
        ):
            return await self._hot(statement, single=True)

    def woken_since_claim(self, queue: str) -> bool:
        """Whether `queue` was woken after its last claim here began its statement (a wake-up
        before that announced a job the claim saw already, or found taken)."""
        return self._wakeups.woken_at.get(queue, 0.0) >= self._claimed_at.get(queue, -1.0)

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        """Apply outcomes whose fence is current, all in one transaction."""
        validate.check_settlements(settlements)
        if not settlements:
            return SettleResult(applied=(), refused=())
        now = self._now()
        # a completion records no error and wakes nobody, so every completion goes through the
        # batched statement, and the hot path (completions only) is that one statement
        plain = [s for s in settlements if s.outcome == "completed"]
        others = [s for s in settlements if s.outcome != "completed"]
        woken: set[str] = set()
        later: list[tuple[str, float]] = []  # retries and snoozes: wake their queue when due

        async def body(conn: Rows) -> set[JobId]:
            applied: set[JobId] = set()
            if plain:
                pairs = stmt.pairs(conn.dialect, [(s.id, s.fence) for s in plain])
                rows = await conn.tuples(stmt.COMPLETE_MANY, {"now": now, **pairs})
                applied.update(row[0] for row in rows)
            errors: list[dict[str, Any]] = []
            for settle in others:
                params = time_params(now, delay=settle.delay_seconds)
                params.update(p_id=settle.id, p_fence=settle.fence)
                rows = await conn.rows(stmt.SETTLE[settle.outcome], params)
                if rows:
                    applied.add(settle.id)
                    if settle.error is not None:  # every outcome here records its text
                        # a snooze gave its attempt back: the entry is the attempt's that snoozed
                        attempt = rows[0].attempt + (settle.outcome == "snoozed")
                        errors.append(_error_row(settle.id, attempt, settle.error, now))
                    if settle.outcome in _RUNNABLE_AGAIN:
                        if settle.delay_seconds == 0:
                            woken.add(rows[0].queue)
                        else:
                            later.append((rows[0].queue, settle.delay_seconds))
            if errors:
                await conn.many(stmt.APPEND_ERRORS, errors)
            await command.wake(conn, woken)
            return applied

        with budget.urgent():  # a settlement ends a lease: it goes before other waits
            applied = await self._hot(body, single=not others)
        self._available(woken)
        for queue, delay in later:
            self.wake_in(queue, delay)
        ids = [s.id for s in settlements]
        return SettleResult(
            applied=tuple(i for i in ids if i in applied),
            refused=tuple(i for i in ids if i not in applied),
        )

    async def job_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        """Extend the leases still held (fence-checked)."""
        validate.check_heartbeat(heartbeat)
        if not heartbeat.leases:
            return HeartbeatResult(extended=(), lost=(), cancel_requested=())
        params = time_params(self._now(), lease=heartbeat.lease_seconds)
        pairs = [(lease.id, lease.fence) for lease in heartbeat.leases]
        params.update(stmt.pairs(self.dialect, pairs))
        with budget.urgent():  # a heartbeat keeps leases: it goes before other waits
            rows = await self._hot(lambda conn: conn.rows(stmt.HEARTBEAT, params), single=True)
        extended = {row.id for row in rows}
        ids = [lease.id for lease in heartbeat.leases]
        return HeartbeatResult(
            extended=tuple(i for i in ids if i in extended),
            lost=tuple(i for i in ids if i not in extended),
            cancel_requested=tuple(row.id for row in rows if row.cancel_requested),
        )

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        """Move executing jobs whose lease expired to retryable, discarded or cancelled."""
        validate.check_count("rescue limit", limit, minimum=1)
        now = self._now()

        async def body(conn: Rows) -> list[Rescued]:
            rows = await conn.rows(stmt.RESCUE, {"now": now, "limit": limit})
            if rows:
                await conn.many(
                    stmt.APPEND_ERRORS,
                    [
                        _error_row(
                            row.id,
                            row.attempt,
                            ErrorInfo(
                                error=f"lease expired: worker {row.worker_id} stopped heartbeating"
                            ),
                            now,
                        )
                        for row in rows
                    ],
                )
                # a job rescued to retryable is due now (run_at = now): wake its queue
                await command.wake(conn, _retryable_queues(rows))
            return [
                Rescued(
                    id=row.id,
                    name=row.name,
                    queue=row.queue,
                    state=row.state,
                    attempt=row.attempt,
                    worker_id=row.worker_id,
                )
                for row in rows
            ]

        rescued = await self._hot(body)
        self._available(_retryable_queues(rescued))
        return rescued

    async def job_grace(self, seconds: float) -> int:
        """Make every executing job's lease last at least `seconds` from now."""
        validate.check_seconds("grace seconds", seconds, positive=True)
        params = time_params(self._now(), lease=seconds)
        rows = await self._hot(lambda conn: conn.tuples(stmt.GRACE, params), single=True)
        return len(rows)

    # -- operator commands ------------------------------------------------------------------

    async def job_cancel(self, job_id: JobId) -> StateChange:
        """Cancel pending work now; executing work gets a cancel request."""
        validate.check_job_id(job_id)
        now = self._now()
        return await self._transact(lambda conn: command.cancel(EngineRows(conn), now, job_id))

    async def job_retry(self, job_id: JobId) -> StateChange:
        """Make retryable or discarded work available now, history kept; its queue is woken."""
        validate.check_job_id(job_id)
        now = self._now()

        async def body(conn: AsyncConnection) -> tuple[StateChange, str | None]:
            rows = EngineRows(conn)
            change, queue = await command.retry(rows, now, job_id)
            if queue is not None:
                await command.wake(rows, [queue])
            return change, queue

        try:
            change, queue = await self._transact(body)
        except StoreError as error:
            from sqlalchemy.exc import IntegrityError

            if isinstance(error.__cause__, IntegrityError):  # a racing insert took the key
                return command.unchanged(job_id, None, "its unique key was taken; try again")
            raise
        if queue is not None:
            self._available([queue])
        return change

    async def job_bulk_count(self, job_filter: JobFilter, sample: int = 10) -> BulkCount:
        """How many jobs the filter matches now, and the first `sample` of them (bulk.py)."""
        states = validate.check_filter(job_filter)
        validate.check_count("bulk sample", sample, minimum=0)
        return await self._transact(lambda conn: bulk.count(conn, job_filter, states, sample))

    async def job_bulk_apply(self, batch: BulkBatch) -> BulkApplied:
        """Lock up to `batch.limit` matching jobs and retry or cancel them (bulk.py)."""
        states = validate.check_bulk_batch(batch)
        now = self._now()

        async def body(conn: AsyncConnection) -> tuple[BulkApplied, set[str]]:
            applied, queues = await bulk.apply(conn, now, batch.filter, states, batch.limit)
            await command.wake(EngineRows(conn), queues)
            return applied, queues

        for attempt in range(_KEY_RACES):
            try:
                applied, queues = await self._transact(body)
                break
            except StoreError as error:
                from sqlalchemy.exc import IntegrityError

                # an insert took a retried job's unique key meanwhile: the batch runs again,
                # and this time sees the key's holder
                if attempt == _KEY_RACES - 1 or not isinstance(error.__cause__, IntegrityError):
                    raise
        self._available(queues)
        return applied

    async def job_prune(self, prune: Prune) -> int:
        """Delete a bounded batch of terminal jobs past retention, oldest first."""
        validate.check_prune(prune)
        now = self._now()
        return await self._hot(lambda rows: command.prune(rows, now, prune), lasting=True)

    async def job_vacuum(self, vacuum: Vacuum) -> Vacuumed:
        """VACUUM the jobs table once dead row versions pile up (PostgreSQL; see vacuum.py)."""
        validate.check_vacuum(vacuum)
        if self.dialect != "postgresql":  # SQLite rewrites rows in place: nothing is left dead
            return Vacuumed(outcome="not_needed")
        # single: an autocommit connection, as VACUUM cannot run inside a transaction
        return await self._hot(lambda rows: vacuum_jobs(rows, vacuum), single=True, lasting=True)

    # -- schedules --------------------------------------------------------------------------

    async def schedule_get(self, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
        """The state rows of these schedules."""
        validate.check_schedule_ids(schedule_ids)
        if not schedule_ids:
            return {}
        return await self._hot(lambda rows: schedule.states(rows, schedule_ids), single=True)

    async def schedule_claim_tick(self, claim: TickClaim) -> TickResult:
        """Compare-and-set the schedule's row; the winner inserts its job and ledger entry."""
        payloads = validate.check_tick_claim(claim)
        now = self._now()
        result = await self._hot(
            lambda rows: schedule.claim_tick(rows, now, claim, payloads),
            single=schedule.one_statement(self.dialect, claim),
        )
        if result.job is not None and claim.job is not None:
            self._woken([claim.job], now)
        return result

    async def schedule_fires(self, schedule_id: str, limit: int = 50) -> list[Fire]:
        """The schedule's fire ledger, newest first."""
        validate.check_schedule_ids([schedule_id])
        validate.check_count("fire list limit", limit, minimum=0)
        return await self._hot(lambda rows: schedule.fires(rows, schedule_id, limit), single=True)

    async def schedule_pause(self, schedule_id: str, paused: bool) -> bool:
        """Pause or resume a schedule for every replica; True when that changed its row."""
        validate.check_schedule_ids([schedule_id])
        now = self._now()
        return await self._hot(
            lambda rows: schedule.pause(rows, now, schedule_id, bool(paused)), single=True
        )

    async def schedule_run_now(self, schedule_id: str, fingerprint: str, job: NewJob) -> Inserted:
        """Insert a schedule's job and its fire now, leaving the schedule's ticks as they were."""
        [payload] = validate.check_run_now(schedule_id, fingerprint, job)
        now = self._now()
        inserted = await self._hot(
            lambda rows: schedule.run_now(rows, now, schedule_id, fingerprint, job, payload)
        )
        self._woken([job], now)
        return inserted

    async def now(self) -> datetime:
        """The store's time: the clock's, this machine's for SQLite, else the database's."""
        value = self._now()
        if value is not None:
            return value
        rows = await self._hot(lambda conn: conn.tuples(stmt.CLOCK, {"now": None}), single=True)
        result: datetime = rows[0][0]
        return result

    # -- observation ------------------------------------------------------------------------

    async def job_get(self, job_id: JobId) -> JobRecord | None:
        """One job in full, with its error history."""
        validate.check_job_id(job_id)
        from sqlalchemy import select

        from ket.store.sql.schema import jobs

        records = await self._records(select(jobs).where(jobs.c.id == job_id))
        return records[0] if records else None

    async def job_list(self, job_query: JobQuery) -> list[JobRecord]:
        """Jobs matching the query, newest first."""
        validate.check_query(job_query)
        from ket.store.sql import query

        return await self._records(query.listing(self.dialect, job_query))

    async def _records(self, statement: Any) -> list[JobRecord]:
        from ket.store.sql import query

        async def body(conn: AsyncConnection) -> list[JobRecord]:
            rows = await fetch_all(conn, statement)
            ids = [row.id for row in rows]
            history = await fetch_all(conn, query.errors_of(ids)) if rows else []
            return query.job_records(rows, history)

        return await self._transact(body)

    async def job_stats(self, *, long_after: float = LONG_TRANSACTION_SECONDS) -> JobStats:
        """Counts by state and queue; oldest lease age and oldest available age; on PostgreSQL
        the jobs table's dead rows and the transactions open longer than `long_after` s (on the
        lane: a worker reading them for its metrics loads no SQLAlchemy)."""
        now = self._now()
        return await self._hot(lambda rows: stats.job_stats(rows, now, long_after), lasting=True)

    # -- reruns (RerunStore; statements in rerun.py) ----------------------------------------

    async def job_rerun(self, rerun: Rerun) -> Reran:
        """Insert a finished job's rerun, linked to it; refused when it has not finished."""
        payloads = validate.check_rerun(rerun)
        now = self._now()
        from ket.store.sql import rerun as reruns

        reran = await self._transact(lambda conn: reruns.rerun(conn, now, rerun, payloads))
        if reran.inserted is not None and not reran.inserted.coalesced:
            self._woken([rerun.job], now)
        return reran

    async def job_reruns(self, job_id: JobId) -> list[JobId]:
        """The ids of the jobs that rerun `job_id`, oldest first."""
        validate.check_job_id(job_id)
        from ket.store.sql import rerun as reruns

        return await self._transact(lambda conn: reruns.reruns(conn, job_id))

    # -- the audit log (AuditLog; statements in audit.py) ----------------------------------

    async def audit_append(self, entry: AuditEntry) -> AuditRecord:
        """Record an operator's action at the store's now."""
        selection = validate.check_audit_entry(entry)
        now = self._now()
        from ket.store.sql import audit

        return await self._transact(lambda conn: audit.append(conn, entry, selection, now))

    async def audit_list(self, query: AuditQuery) -> list[AuditRecord]:
        """A page of the audit log, newest first."""
        validate.check_audit_query(query)
        from ket.store.sql import audit

        return await self._transact(lambda conn: audit.page(conn, query), single=True)

    # -- the dashboard's sessions (SessionStore; statements in session.py) -------------------

    async def session_open(self, session: DashboardSession, *, ttl_seconds: float) -> None:
        """Keep `session` until `ttl_seconds` after the store's now."""
        validate.check_session(session, ttl_seconds)
        now = self._now()
        from ket.store.sql import session as sessions

        await self._transact(lambda conn: sessions.open_session(conn, session, ttl_seconds, now))

    async def session_find(self, key: str) -> DashboardSession | None:
        """The live session with `key`, if any."""
        validate.check_session_key(key)
        now = self._now()
        from ket.store.sql import session as sessions

        return await self._transact(lambda conn: sessions.find_session(conn, key, now), single=True)

    async def session_close(self, key: str) -> None:
        """End the session with `key`."""
        validate.check_session_key(key)
        from ket.store.sql import session as sessions

        await self._transact(lambda conn: sessions.close_session(conn, key))

    # -- the sent ledger (SentLedger) -------------------------------------------------------

    async def message_claim(self, key: str, *, stale_after_seconds: float) -> bool:
        """Claim `key`; False if it was sent, or claimed less than `stale_after_seconds` ago."""
        validate.check_message_claim(key, stale_after_seconds)
        params = time_params(self._now(), stale=-stale_after_seconds)
        params["p_key"] = key
        rows = await self._hot(lambda conn: conn.rows(stmt.LEDGER_CLAIM, params), single=True)
        return bool(rows)

    async def message_confirm(self, key: str) -> None:
        """Record that the message with `key` was sent."""
        validate.check_message_key(key)
        params = {"now": self._now(), "p_key": key}
        await self._hot(lambda conn: conn.rows(stmt.LEDGER_CONFIRM, params), single=True)

    async def message_release(self, key: str) -> None:
        """Give up a claim that did not end in a send (a sent message stays recorded)."""
        validate.check_message_key(key)
        params = {"p_key": key}
        await self._hot(lambda conn: conn.rows(stmt.LEDGER_RELEASE, params), single=True)

    async def message_sent(self, key: str) -> bool:
        """Whether the message with `key` was confirmed sent."""
        validate.check_message_key(key)
        params = {"p_key": key}
        rows = await self._hot(lambda conn: conn.rows(stmt.LEDGER_SENT, params), single=True)
        return bool(rows)

    # -- wake-ups and lifecycle -------------------------------------------------------------

    async def wait_for_jobs(self, queues: Collection[str], timeout: float) -> bool:
        """Wait for a wake-up (NOTIFY on PostgreSQL, a datagram on SQLite) or the timeout."""
        return await (await self.watch_for_jobs(queues, timeout)).wait()

    async def watch_for_jobs(self, queues: Collection[str], timeout: float) -> JobWatch:
        """A wait for a wake-up on `queues`, registered when this returns (LISTEN in place, or
        the wait shortened to a poll while NOTIFY is deaf)."""
        validate.check_timeout(timeout)
        if self._closed:
            raise StoreError("the store is closed")
        with translated(self._failure):
            if self._dsn is not None:
                if self._listener is None:
                    self._listener = (
                        listening.acquire(self._dsn, self._wakeups)
                        if self._channel is None
                        else self._channel.listen(self._wakeups)
                    )
                await self._listener.ready(min(timeout, LISTEN_READY_SECONDS))
                timeout = self._listener.max_wait(timeout)  # poll-only while NOTIFY is deaf
            elif self.dialect == "sqlite":
                from ket.wakeup import sqlite as sqlite_wakeup

                if isinstance(self._wakeups, sqlite_wakeup.FolderWakeups):
                    self._inbox = sqlite_wakeup.listening(self._wakeups, self._inbox)
        return self._wakeups.watch(queues, timeout)

    @property
    def paced(self) -> bool:
        """Whether this tenant's wake-ups come through the control channel (several tenants
        on PostgreSQL, see control_channel): the worker then visits it on a slow safety sweep
        rather than having each queue poll."""
        return self._channel is not None

    def idle_poll(self, poll_max: float) -> float:
        """How long a queue with no due job may wait for a wake-up before it claims again:
        `poll_max`; with the control channel listening, for ever (`math.inf`): the hints,
        `wake_when_due` and the worker's safety visit wake a queue when it has work, and the
        listener wakes every waiter when it is lost (its queues then poll every `poll_max`).
        A thousand idle tenants' queues then hold no timer, nor claim in vain every few
        minutes."""
        listener = self._listener
        if self._channel is None or listener is None or not listener.healthy:
            return poll_max
        return math.inf

    def jobs_available(self, queues: Collection[str]) -> None:
        """Jobs committed where this store could not see the commit (an application's own
        connection) may run on `queues`: the workers are woken as for the store's own writes."""
        self._available(queues)

    def wake(self, queues: Collection[str]) -> None:
        """Wake these queues' waiters in this process now (they claim)."""
        self._wakeups.notify(queues)

    async def lease_end(self) -> float | None:
        """Seconds until the earliest lease of an executing job ends; None when none runs."""
        params = time_params(self._now())
        rows = await self._hot(lambda conn: conn.rows(stmt.LEASE_END, params), single=True)
        if not rows or rows[0].ends is None:
            return None
        left: float = (rows[0].ends - rows[0].now).total_seconds()
        return max(left, 0.0)

    async def wake_when_due(self, queue: str) -> None:
        """Wake `queue` when its next runnable job is due (a job enqueued to run later, a
        retry's backoff): asked after a claim found nothing to do."""
        left = await self._next_due(queue)
        if left is not None:
            self.wake_in(queue, left)

    async def _next_due(self, queue: str) -> float | None:
        """Seconds until `queue`'s next runnable job is due (0.0: now); None: it has none."""
        params = {**time_params(self._now()), "p_queue": queue}
        rows = await self._hot(lambda conn: conn.rows(stmt.NEXT_DUE, params), single=True)
        if not rows or rows[0].due is None:
            return None
        left: float = (rows[0].due - rows[0].now).total_seconds()
        return max(left, 0.0)

    async def look(self, queues: Collection[str]) -> Look:
        """The safety visit's question in one statement (PostgreSQL): when the earliest lease
        ends, and when each of `queues` has its next runnable job due."""
        if self.dialect != "postgresql":  # no worker visits SQLite: the same answer, slower
            return await self._look_each(queues)
        params = {**time_params(self._now()), "p_queues": list(queues)}
        rows = await self._hot(lambda conn: conn.rows(stmt.LOOK, params), single=True)
        lease_end: float | None = None
        due: dict[str, float] = {}
        for row in rows:
            if row.at is None:
                continue
            left = max((row.at - row.now).total_seconds(), 0.0)
            if row.queue is None:
                lease_end = left
            else:
                due[row.queue] = left
        return Look(lease_end=lease_end, due=due)

    async def _look_each(self, queues: Collection[str]) -> Look:
        """`look` as a statement per question."""
        due: dict[str, float] = {}
        for queue in queues:
            left = await self._next_due(queue)
            if left is not None:
                due[queue] = left
        return Look(lease_end=await self.lease_end(), due=due)

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

    # -- model rows (RecordStore; statements in records.py) ---------------------------------

    @cached_property
    def _rows(self) -> SqlRecords:
        from ket.store.sql.records import SqlRecords

        return SqlRecords(self.dialect)

    async def record_install(self, models: Sequence[ModelTable]) -> None:
        """Create missing model tables and add missing columns; never drops anything."""
        from ket.store.sql.records import install

        checked = self._rows.prepare_install(models)
        # on PostgreSQL, one question on the lane first: the tables are there (`ket migrate`
        # made them, or the last start) and nothing is to be done, most of the time
        if self._lane is None or not await self._hot(
            lambda conn: _models_complete(conn, checked), single=True
        ):
            await self._transact(lambda conn: conn.run_sync(install, checked))
        self._rows.installed(checked)

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; returns its new id."""
        return await self._transact(self._rows.insert(model, values).run, single=True)

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id, or None."""
        return await self._transact(self._rows.get(model, record_id).run, single=True)

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where`, oldest first, at most `limit`."""
        call = self._rows.select(model, where, limit)
        return await self._transact(call.run, single=True)

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the rows matching `where`; how many rows matched."""
        call = self._rows.update(model, where, values)
        return await self._transact(call.run, single=True)

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the rows matching `where`; how many."""
        return await self._transact(self._rows.delete(model, where).run, single=True)


async def _models_complete(connection: Rows, models: Sequence[RecordModel]) -> bool:
    """Whether the models' tables have every column already (on the lane's connection)."""
    from ket.store.sql.records import PRESENT_COLUMNS, complete

    assert isinstance(connection, LaneConnection)
    tables = [model.table for model in models]
    async with connection.raw.cursor() as cursor:
        await cursor.execute(PRESENT_COLUMNS, {"tables": tables})
        return complete(models, await cursor.fetchall())


def insert_on(
    connection: object,
    batch: Sequence[NewJob],
    *,
    now: datetime | None = None,
    write_locked: bool = False,
) -> list[Inserted]:
    """Insert jobs on a synchronous connection, inside its transaction: a SQLAlchemy
    Connection, a psycopg 3 Connection or Django's connection (app_connection.py), or one
    already adapted; ConnectionRejected for anything else.

    `now` None means the database's time (this machine's for SQLite); `write_locked` says the
    transaction holds SQLite's write lock from its start (ket's own engines do).
    """
    app = connection if isinstance(connection, AppConnection) else app_connection(connection)
    payloads = validate.encode_payloads(batch)
    if not batch:
        return []
    dialect = app.rows.dialect
    if now is None and dialect == "sqlite":
        now = datetime.now(UTC)
    plan = insert_plan(dialect, now, batch, payloads, write_locked=write_locked)
    with translated(app.failure), app.transaction():
        return run_sync(app.rows, plan)


class SqlTransaction:
    """An open transaction of a SqlStore: `connection` for the caller's own statements."""

    def __init__(self, store: SqlStore) -> None:
        self._store = store
        self.connection: AsyncConnection | None = None
        self.pending: list[tuple[Sequence[NewJob], datetime | None]] = []

    async def job_insert(self, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in this transaction: they exist if and only if it commits."""
        if self.connection is None:
            raise StoreError("the transaction is over")
        payloads = validate.encode_payloads(batch)
        if not batch:
            return []
        now = self._store._now()
        plan = insert_plan(self._store.dialect, now, batch, payloads)
        with translated(self._store._failure):
            inserted = await run_plan(EngineRows(self.connection), plan)
        self.pending.append((batch, now))
        return inserted

    # -- model rows, on this transaction's connection ---------------------------------------

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row that exists if and only if the transaction commits; its id."""
        return await self._run(self._store._rows.insert(model, values))

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id as this transaction sees it, or None."""
        return await self._run(self._store._rows.get(model, record_id))

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where` as this transaction sees them, oldest first."""
        return await self._run(self._store._rows.select(model, where, limit))

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the matching rows, in this transaction; how many matched."""
        return await self._run(self._store._rows.update(model, where, values))

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the matching rows, in this transaction; how many."""
        return await self._run(self._store._rows.delete(model, where))

    async def _run(self, call: RecordCall[T]) -> T:
        # no lock retry here: the transaction already holds SQLite's write lock (BEGIN IMMEDIATE)
        if self.connection is None:
            raise StoreError("the transaction is over")
        with translated(self._store._failure):
            return await call.run(self.connection)


def _error_row(
    job_id: JobId, attempt: int, error: ErrorInfo, now: datetime | None
) -> dict[str, Any]:
    return {
        "p_job_id": job_id,
        "p_attempt": attempt,
        "p_error": error.error,
        "p_traceback": error.traceback,
        "now": now,
    }


def _retryable_queues(rows: Sequence[Any]) -> set[str]:
    """The queues of rescued jobs that are retryable, hence due at once."""
    return {row.queue for row in rows if row.state == "retryable"}


__all__ = ["SqlStore", "SqlTransaction"]


# what Lane takes from SqlStore.open's options; any other is SQLAlchemy's (see SqlStore.open)
_LANE_OPTIONS = frozenset({"pool_timeout", "connect_args", "max_overflow"})
