"""The storage contract: the small JobStore protocol, and the capabilities a store may add.

Any store that passes the conformance kit (`ket.tck`) is a valid backend. The core protocol is
the minimum a store must get right to run jobs safely; observation, push wake-ups, enqueue in a
caller's transaction, vacuuming, the audit log and reruns are separate protocols that callers
test for with isinstance().

Errors: every operation raises StoreError or a subclass; nothing else escapes. A call the store
refuses (a bad value, named in the message) raises JobRejected before anything is written, the
same refusals on every store (`ket.store.validate`). A failure of the store itself (a database
error, a lost connection, no free connection in the pool) raises a StoreError that is not a
JobRejected, with the original exception as its `__cause__`. Only a `transaction()` block's own
exceptions pass through as they are.

Wake-ups: a PushStore wakes the waiters of a queue after every change that makes work claimable
at once there (an insert due now, an operator retry, a zero-delay snooze or retry, a rescue to
retryable), once the change is committed; a completion wakes nobody.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ket.store.types import (
    AuditEntry,
    AuditQuery,
    AuditRecord,
    BulkApplied,
    BulkBatch,
    BulkCount,
    ClaimedJob,
    ClaimLimits,
    DashboardSession,
    Fire,
    Heartbeat,
    HeartbeatResult,
    Inserted,
    JobClaim,
    JobFilter,
    JobId,
    JobMinutes,
    JobQuery,
    JobRecord,
    JobStats,
    Look,
    MinuteQuery,
    ModelTable,
    NewJob,
    Prune,
    QueuePause,
    Reran,
    Rerun,
    Rescued,
    ScheduleState,
    Settle,
    SettleResult,
    StateChange,
    StepRecord,
    TickClaim,
    TickResult,
    Vacuum,
    Vacuumed,
    Where,
)

if TYPE_CHECKING:
    from ket.store.watch import JobWatch


@runtime_checkable
class JobStore(Protocol):
    """Persist jobs and schedules for one tenant database."""

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in one round trip; a unique key coalesces with the active job holding it."""
        ...

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        """Claim due jobs in priority, run-at, id order; each gets a lease and a new fence."""
        ...

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        """Apply attempt outcomes in one transaction; a stale fence is refused, not applied."""
        ...

    async def job_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        """Extend the leases still held; report lost leases and requested cancels."""
        ...

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        """Move executing jobs whose lease expired to retryable (or discarded), error recorded."""
        ...

    async def job_grace(self, seconds: float) -> int:
        """Make every executing job's lease last at least `seconds` from now (expired ones too);
        returns how many leases were lengthened. A rescuer's first write after an outage."""
        ...

    async def job_cancel(self, job_id: JobId) -> StateChange:
        """Cancel non-terminal work; executing work is marked so its worker aborts it."""
        ...

    async def job_retry(self, job_id: JobId) -> StateChange:
        """Make retryable or discarded work available now, keeping its history."""
        ...

    async def job_prune(self, prune: Prune) -> int:
        """Delete up to `prune.limit` terminal jobs past retention; returns how many."""
        ...

    async def schedule_get(self, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
        """The state rows of these schedules (absent: never installed)."""
        ...

    async def schedule_claim_tick(self, claim: TickClaim) -> TickResult:
        """Compare-and-set a schedule's row; the winner's job and ledger entry commit with it."""
        ...

    async def now(self) -> datetime:
        """The store's time (the database's, or the test clock's)."""
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...


@runtime_checkable
class PushStore(Protocol):
    """Capability: the store wakes idle workers when work may be available (hints only)."""

    async def wait_for_jobs(self, queues: Collection[str], timeout: float) -> bool:
        """Wait up to `timeout` seconds for a wake-up on any of `queues`; False on timeout."""
        ...

    async def watch_for_jobs(self, queues: Collection[str], timeout: float) -> JobWatch:
        """The same wait, registered when this returns and not awaited: its `woken` future
        resolves True on a wake-up, False after `timeout` seconds; `close()` ends it. A claim
        loop with nothing to do waits so without a task (runtime/queue.py)."""
        ...


@runtime_checkable
class PacedStore(Protocol):
    """Capability: the store paces idle queues, so that many idle tenants cost little: how long
    a queue with nothing to do may wait before it claims again, a wake-up when its next job is
    due, and what the worker's safety visit needs (runtime/visit.py)."""

    @property
    def paced(self) -> bool:
        """Whether wake-ups reach this store's worker as hints only (a control channel), so
        that it visits the tenant on a slow safety sweep rather than polling."""
        ...

    def idle_poll(self, poll_max: float) -> float:
        """The longest idle wait for a queue (at least `poll_max`)."""
        ...

    async def wake_when_due(self, queue: str) -> None:
        """Wake `queue`'s waiters when its next runnable job is due."""
        ...

    def wake(self, queues: Collection[str]) -> None:
        """Wake these queues' waiters in this process now."""
        ...

    async def lease_end(self) -> float | None:
        """Seconds until the earliest lease of an executing job ends; None when none runs."""
        ...

    async def look(self, queues: Collection[str]) -> Look:
        """The safety visit's question, in one statement: `lease_end()`'s answer, and when
        each of `queues` has its next runnable job due."""
        ...

    def wake_in(self, queue: str, seconds: float) -> None:
        """Wake `queue`'s waiters in this process in `seconds` (the earliest asked for is
        kept)."""
        ...

    def woken_since_claim(self, queue: str) -> bool:
        """Whether `queue` was woken since its last claim here began: a wake-up that came
        while that claim waited for its connection announced a job the claim saw already."""
        ...


@runtime_checkable
class QueryableStore(Protocol):
    """Capability: read access for tools, tests and the dashboard."""

    async def job_get(self, job_id: JobId) -> JobRecord | None:
        """One job in full, or None."""
        ...

    async def job_list(self, query: JobQuery) -> list[JobRecord]:
        """Jobs matching the query, newest first."""
        ...

    async def job_stats(self, limits: Mapping[str, ClaimLimits] | None = None) -> JobStats:
        """Counts by state and queue, oldest lease age and oldest available age; with the
        queues' fleet-wide `limits` (catalog.claim_limits), the due jobs each holds back."""
        ...

    async def schedule_fires(self, schedule_id: str, limit: int = 50) -> list[Fire]:
        """The schedule's fire ledger, newest first."""
        ...


@runtime_checkable
class BulkStore(Protocol):
    """Capability: retry or cancel every job a filter matches, a bounded batch at a time.

    Each job changes as `job_retry` or `job_cancel` would change it alone, under the same lock
    a worker's claim and settlement take, so a job a worker claims or settles meanwhile ends as
    if the two had happened one after the other. A caller loops, moving `after_id` on to each
    batch's `last_id`, until a batch matches nothing.
    """

    async def job_bulk_count(self, job_filter: JobFilter, sample: int = 10) -> BulkCount:
        """How many jobs the filter matches now, and the first `sample` of them."""
        ...

    async def job_bulk_apply(self, batch: BulkBatch) -> BulkApplied:
        """Retry or cancel up to `batch.limit` matching jobs in one transaction."""
        ...


@runtime_checkable
class AuditLog(Protocol):
    """Capability: the tenant's audit log, who retried or cancelled what (the dashboard and
    `ket jobs retry/cancel` append to it; entries are never changed)."""

    async def audit_append(self, entry: AuditEntry) -> AuditRecord:
        """Record `entry` at the store's now; the record, with its id."""
        ...

    async def audit_list(self, query: AuditQuery) -> list[AuditRecord]:
        """A page of the log, newest first."""
        ...


@runtime_checkable
class SessionStore(Protocol):
    """Capability: the dashboard's sign-in sessions of the tenant, shared by every server in
    front of its database, so that a sign-out on one ends the session on all."""

    async def session_open(self, session: DashboardSession, *, ttl_seconds: float) -> None:
        """Keep `session` until `ttl_seconds` after the store's now (sessions that expired
        meanwhile are let go)."""
        ...

    async def session_find(self, key: str) -> DashboardSession | None:
        """The session with `key`, with its `expires_at`, unless it expired or was closed."""
        ...

    async def session_close(self, key: str) -> None:
        """End the session with `key` (nothing if there is none)."""
        ...


@runtime_checkable
class RerunStore(Protocol):
    """Capability: a finished job's work enqueued again as a new job linked to it (`ket jobs
    rerun`); the link is the new job's `rerun_of`."""

    async def job_rerun(self, rerun: Rerun) -> Reran:
        """Insert `rerun.job` with `rerun_of` = `rerun.origin` if that job has finished, in one
        transaction; refused (nothing written) when it has not or does not exist."""
        ...

    async def job_reruns(self, job_id: JobId) -> list[JobId]:
        """The ids of the jobs that rerun `job_id`, oldest first."""
        ...


@runtime_checkable
class StepStore(Protocol):
    """Capability: the durable steps of a job's handler (`ctx.step`): a step that finished is
    recorded once, under the attempt's fence, and a later attempt reads it instead of running
    it again; the records go with the job."""

    async def job_steps(self, job_id: JobId) -> dict[str, str]:
        """The steps of `job_id` recorded so far: name -> the JSON text of its value."""
        ...

    async def job_step_record(self, step: StepRecord) -> bool:
        """Record `step` if its fence is the job's and the job is executing; False (nothing
        written) otherwise, and when a step of that name is recorded already (it keeps its
        first value)."""
        ...


@runtime_checkable
class QueueControl(Protocol):
    """Capability: an operator pauses and resumes a queue of the tenant. No worker claims a
    paused queue's jobs (attempts running when it was paused finish); enqueues go on, and
    their jobs wait. Resuming wakes the queue's waiters."""

    async def queue_pause(self, queue: str, *, paused_by: str) -> bool:
        """Pause `queue` (declared or not: the caller checks); True when it was not paused."""
        ...

    async def queue_resume(self, queue: str) -> bool:
        """Resume `queue` and wake its waiters; True when it was paused."""
        ...

    async def queue_pauses(self) -> dict[str, QueuePause]:
        """The paused queues, by name."""
        ...


@runtime_checkable
class ScheduleControl(Protocol):
    """Capability: an operator's hand on schedules (`ket schedules`, the dashboard)."""

    async def schedule_pause(self, schedule_id: str, paused: bool) -> bool:
        """Pause (or resume) the schedule for every replica: a paused schedule's ticks are not
        fired, and count as skipped once it is resumed. True when that changed its row; a
        schedule no sweep has installed yet gets a row holding the pause."""
        ...

    async def schedule_run_now(self, schedule_id: str, fingerprint: str, job: NewJob) -> Inserted:
        """Insert `job` (built as a tick's, carrying its `tick`) and its fire in the ledger, in
        one transaction, leaving the schedule's own ticks as they were."""
        ...


@runtime_checkable
class Records(Protocol):
    """Rows of the application's declared models in the tenant database.

    Offered by a RecordStore and by its transactions. Model and field names are checked against
    the installed tables; an unknown one raises StoreError naming it.
    """

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; returns the id the store generated for it."""
        ...

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id (including `id`), or None."""
        ...

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching every filter in `where`, oldest first, at most `limit`."""
        ...

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the rows matching `where`; returns how many rows changed."""
        ...

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the rows matching `where`; returns how many."""
        ...


@runtime_checkable
class RecordStore(Records, Protocol):
    """Capability: the store keeps the application's model rows too (`ctx.db`)."""

    async def record_install(self, models: Sequence[ModelTable]) -> None:
        """Create the tables of these models (idempotent; new fields become new columns)."""
        ...


@runtime_checkable
class SentLedger(Protocol):
    """Capability: which outbound messages a tenant sent, by idempotency key.

    A transport claims a key before sending and confirms it after; a key that is claimed or
    confirmed is not sent again. A failed send releases its claim so a retry can send it.
    """

    async def message_claim(self, key: str, *, stale_after_seconds: float) -> bool:
        """Claim `key`; False if it was sent, or claimed less than `stale_after_seconds` ago."""
        ...

    async def message_confirm(self, key: str) -> None:
        """Record that the message with `key` was sent."""
        ...

    async def message_release(self, key: str) -> None:
        """Give up a claim that did not end in a send."""
        ...

    async def message_sent(self, key: str) -> bool:
        """Whether the message with `key` was confirmed sent (a mere claim is not)."""
        ...


@runtime_checkable
class MinuteStore(Protocol):
    """Capability: the tenant's jobs per minute and queue, for the dashboard's charts.

    A count reads the jobs table, never the hot path: the jobs enqueued and the failed attempts
    recorded since the last count (by id, one count late, so that a transaction that committed
    behind a later id is counted too), the jobs that finished in that span, and a sample of
    each queue's backlog. However many processes ask, one counts per interval.
    """

    async def minute_record(self, every: float) -> bool:
        """Count since the last count, if that was `every` seconds ago or more; minutes older
        than MINUTES_KEPT are dropped. True when this call counted."""
        ...

    async def minute_list(self, query: MinuteQuery) -> JobMinutes:
        """The per-minute counts `query` asks for, and how far the counts have come."""
        ...


@runtime_checkable
class VacuumStore(Protocol):
    """Capability: the store reclaims the dead row versions that claimed and finished jobs leave
    in the jobs table (PostgreSQL keeps them until a VACUUM).

    Until they are reclaimed a claim walks past the index entries of every job claimed since the
    last vacuum, so a large backlog drains slower the further it gets; autovacuum, where it runs
    at all, comes at most once a minute (`autovacuum_naptime`).
    """

    async def job_vacuum(self, vacuum: Vacuum) -> Vacuumed:
        """Vacuum the jobs table if it holds as many dead row versions as `vacuum` says; never
        waits for a vacuum already running, never blocks claims or settlements."""
        ...


class StoreTransaction(Protocol):
    """An open transaction: business writes on `connection`, jobs through `job_insert`."""

    @property
    def connection(self) -> Any:
        """The store-specific connection the caller's own statements run on."""
        ...

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs inside this transaction: they exist if and only if it commits."""
        ...


@runtime_checkable
class TransactionalStore(Protocol):
    """Capability: enqueue inside a transaction shared with the caller's own writes."""

    def transaction(self) -> AbstractAsyncContextManager[StoreTransaction]:
        """Open a transaction; commits on normal exit, rolls back on an exception.

        Wake-ups for the jobs inserted in it are sent only after the commit.
        """
        ...
