"""The store's core (JobStore): insert, claim, settle, heartbeat, rescue, grace, and the
operator's cancel, retry and prune of one job. Also the inserts on an application's own
connection (`job_insert_sync`, `job_insert_on`, `insert_on`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ket.connection import budget
from ket.errors import StoreError
from ket.store import validate
from ket.store.admission import Admitted
from ket.store.failure import translated
from ket.store.sql import command
from ket.store.sql import statement as stmt
from ket.store.sql.app_connection import (
    AppConnection,
    AsyncAppConnection,
    app_connection,
    async_app_connection,
)
from ket.store.sql.fetch import EngineRows, Rows
from ket.store.sql.gather import Gather, gathers
from ket.store.sql.insert import insert_plan, one_statement, run_plan, run_sync
from ket.store.sql.limit import expire, limited_claim
from ket.store.sql.now import time_params
from ket.store.types import (
    ClaimedJob,
    ErrorInfo,
    Heartbeat,
    HeartbeatResult,
    Inserted,
    JobClaim,
    JobId,
    NewJob,
    Prune,
    Rescued,
    Settle,
    SettleResult,
    StateChange,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

from ket.store.sql.capabilities.session import SqlSession

# A queue whose limited claim here met a concurrency limit at work (a key or the queue full, a
# job held back): for this long the attempts' ends here wake its waiters (NOTIFY, hints); with
# no contention an end wakes nobody, and a drain under limits it never reaches pays nothing
CONTENDED_SECONDS = 10.0
# ... and a claim that met it looks again within this long, whatever wake-up it hears
CONTENDED_RECHECK_SECONDS = 1.0
# how often a claim discards its queue's expired jobs at most, where that costs a statement
EXPIRE_EVERY = timedelta(seconds=1)
# outcomes that, with no delay, make the job claimable at once: its queue's waiters are woken
_RUNNABLE_AGAIN = frozenset({"retryable", "snoozed"})


class SqlJobs(SqlSession):
    """JobStore's job operations."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # concurrent inserts of plain jobs share a statement and its commit (gather.py)
        self._gather = Gather(self._inserted)

    async def close(self) -> None:
        """As the session's, once the inserts gathered under way have committed."""
        await self._gather.close()
        await super().close()

    async def job_insert(self, batch: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in one transaction; unique keys coalesce with their active holder.
        Plain jobs inserted concurrently through this store commit together (gather.py)."""
        payloads = validate.encode_payloads(batch)
        if not batch:
            return []
        if gathers(batch):
            inserted = await self._gather.insert(batch, payloads)
        else:
            inserted = await self._inserted(batch, payloads)
        self._woken(batch, self._now())
        return inserted

    async def _inserted(self, batch: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        """Insert `batch`, its payloads encoded already, in one statement or transaction."""
        now = self._now()
        # one statement needs no transaction of its own; several do
        single = one_statement(self.dialect, batch)
        return await self._hot(
            lambda rows: run_plan(rows, insert_plan(self.dialect, now, batch, payloads)),
            single=single,
        )

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

        async def expiring(rows: Rows) -> list[Any]:
            """SQLite: the queue's expired jobs discarded, and why, then the claim (on
            PostgreSQL the claim's one statement does both)."""
            await expire(rows, params)
            return await statement(rows)

        limits = claim.limits
        admissions: list[Admitted] = []
        body, single = statement, True  # one statement, in autocommit
        if limits is not None:  # one at a time per queue (limit.py)
            postgres = self.dialect == "postgresql"
            upkeep = not postgres and self._upkeep_due(claim.queue, params["now"])

            async def limited(rows: Rows) -> list[Any]:
                began[0] = time.monotonic()
                claimed, admitted = await limited_claim(rows, claim, limits, params, upkeep=upkeep)
                admissions.append(admitted)
                return claimed

            # PostgreSQL: one call of ket_limited_claim; SQLite: a transaction of its own
            body, single = limited, postgres
        elif self.dialect == "sqlite" and self._upkeep_due(claim.queue, params["now"]):
            body, single = expiring, False
        if not single:
            rows = await self._hot(body)
        elif self._channel is None:  # one tenant: its connections are its own
            rows = await self._hot(body, single=True)
        else:
            rows = await self._claim_hinted(claim.queue, body)
        if admissions:
            self._admitted(claim.queue, admissions[-1])  # the last: a retried one ran again
        self._claimed_at[claim.queue] = began[0]
        claimed = [stmt.claimed_job(row) for row in rows]
        return sorted(claimed, key=lambda job: (job.priority, job.run_at, job.id))

    def _admitted(self, queue: str, admitted: Admitted) -> None:
        """What a limited claim of `queue` admitted tells the wake-ups."""
        if admitted.contended:
            # for a while, this process's attempts of the queue wake its waiters as they
            # end (here and, by NOTIFY, elsewhere); and this one looks again within
            # CONTENDED_RECHECK_SECONDS whatever it hears: an end elsewhere may come from
            # a process that saw no contention
            self._limited[queue] = time.monotonic()
            self.wake_in(queue, CONTENDED_RECHECK_SECONDS)
        if admitted.retry_at is not None:  # a rate held a job back: look again then
            wait = (admitted.retry_at - (self._now() or datetime.now(UTC))).total_seconds()
            self.wake_in(queue, max(wait, 0.0))

    def _contended(self) -> set[str]:
        """The queues whose limited claims here met a concurrency limit at work within the
        last CONTENDED_SECONDS: an attempt's end there may let a waiting job start."""
        if not self._limited:
            return set()
        since = time.monotonic() - CONTENDED_SECONDS
        return {queue for queue, at in self._limited.items() if at >= since}

    def _upkeep_due(self, queue: str, now: datetime | None) -> bool:
        """Whether this claim also discards the queue's expired jobs (and, limited, forgets
        its old starts): at most once every EXPIRE_EVERY of the store's time a queue, where it
        costs a statement (SQLite's claims, limited claims). The claim's own filter keeps an
        expired job from ever starting; the discard only records it."""
        if now is None:  # not SQLite's way (its instants come from Python): do it every time
            return True
        last = self._expired_at.get(queue)
        if last is not None and timedelta(0) <= now - last < EXPIRE_EVERY:
            return False
        self._expired_at[queue] = now
        return True

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
        results = [s for s in plain if s.result is not None]  # written in the same transaction
        woken: set[str] = set()
        later: list[tuple[str, float]] = []  # retries and snoozes: wake their queue when due
        limited = self._contended()

        async def body(conn: Rows) -> set[JobId]:
            applied: set[JobId] = set()
            if plain:
                pairs = stmt.pairs(conn.dialect, [(s.id, s.fence) for s in plain])
                rows = await conn.tuples(stmt.COMPLETE_MANY, {"now": now, **pairs})
                applied.update(row[0] for row in rows)
                if limited:  # an attempt that ends under a concurrency limit frees a place
                    woken.update(row[1] for row in rows if row[1] in limited)
                kept = [
                    {"p_job_id": s.id, "p_result": s.result} for s in results if s.id in applied
                ]
                if kept:  # with their completions, or not at all
                    await conn.many(stmt.STORE_RESULT, kept)
            errors: list[dict[str, Any]] = []
            for settle in others:
                params = time_params(now, delay=settle.delay_seconds)
                params.update(p_id=settle.id, p_fence=settle.fence)
                rows = await conn.rows(stmt.SETTLE[settle.outcome], params)
                if rows:
                    applied.add(settle.id)
                    if rows[0].queue in limited:
                        woken.add(rows[0].queue)
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
            applied = await self._hot(body, single=not others and not results)
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
        reported = [lease for lease in heartbeat.leases if lease.progress is not None]

        async def body(conn: Rows) -> list[Any]:
            rows = await conn.rows(stmt.HEARTBEAT, params)
            held = {row.id for row in rows}
            kept = [
                {"p_job_id": lease.id, "p_progress": lease.progress}
                for lease in reported
                if lease.id in held
            ]
            if kept:  # with the leases they came with: the row is this attempt's
                await conn.many(stmt.SET_PROGRESS, kept)
            return rows

        with budget.urgent():  # a heartbeat keeps leases: it goes before other waits
            rows = await self._hot(body, single=not reported)
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
                # a job rescued to retryable is due now (run_at = now): wake its queue; and
                # one under a concurrency limit freed a place
                freed = {row.queue for row in rows if row.queue in self._contended()}
                await command.wake(conn, _retryable_queues(rows) | freed)
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
        self._available(
            _retryable_queues(rescued) | {r.queue for r in rescued if r.queue in self._limited}
        )
        return rescued

    async def job_grace(self, seconds: float) -> int:
        """Make every executing job's lease last at least `seconds` from now."""
        validate.check_seconds("grace seconds", seconds, positive=True)
        params = time_params(self._now(), lease=seconds)
        rows = await self._hot(lambda conn: conn.tuples(stmt.GRACE, params), single=True)
        return len(rows)

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

    async def job_prune(self, prune: Prune) -> int:
        """Delete a bounded batch of terminal jobs past retention, oldest first."""
        validate.check_prune(prune)
        now = self._now()
        return await self._hot(lambda rows: command.prune(rows, now, prune), lasting=True)


def insert_on(
    connection: object,
    batch: Sequence[NewJob],
    *,
    now: datetime | None = None,
    write_locked: bool = False,
    payloads: Sequence[str] | None = None,
) -> list[Inserted]:
    """Insert jobs on a synchronous connection, inside its transaction: a SQLAlchemy
    Connection, a psycopg 3 Connection or Django's connection (app_connection.py), or one
    already adapted; ConnectionRejected for anything else.

    `now` None means the database's time (this machine's for SQLite); `write_locked` says the
    transaction holds SQLite's write lock from its start (ket's own engines do); `payloads`,
    the jobs' inputs checked and encoded already (validate.encode_payloads).
    """
    app = connection if isinstance(connection, AppConnection) else app_connection(connection)
    if payloads is None:
        payloads = validate.encode_payloads(batch)
    if not batch:
        return []
    dialect = app.rows.dialect
    if now is None and dialect == "sqlite":
        now = datetime.now(UTC)
    plan = insert_plan(dialect, now, batch, payloads, write_locked=write_locked)
    with translated(app.failure), app.transaction():
        return run_sync(app.rows, plan)


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
