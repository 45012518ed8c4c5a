"""The values that cross the store contract: params in, typed frozen rows out.

A job is a row in the tenant's database. Its states::

    scheduled --due--> available ; retryable --due or operator retry--> available
    available --claim and lease--> executing
    executing --success--> completed
    executing --failure, attempts remain--> retryable ; executing --lease expires--> retryable
    executing --attempts exhausted or Discard--> discarded
    available | scheduled | retryable --cancel--> cancelled
    executing --cancel: cancel requested; the worker aborts, then settles--> cancelled

Due `scheduled` and `retryable` rows are claimed directly: nothing has to move them to
`available` first, so a delayed job costs one write less.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

JobId = int
JobState = Literal[
    "available", "scheduled", "executing", "retryable", "completed", "discarded", "cancelled"
]
JOB_STATES: tuple[JobState, ...] = (
    "available",
    "scheduled",
    "executing",
    "retryable",
    "completed",
    "discarded",
    "cancelled",
)
RUNNABLE_STATES: tuple[JobState, ...] = ("available", "scheduled", "retryable")
ACTIVE_STATES: tuple[JobState, ...] = ("available", "scheduled", "executing", "retryable")
TERMINAL_STATES: tuple[JobState, ...] = ("completed", "discarded", "cancelled")
RETRY_STATES: tuple[JobState, ...] = ("retryable", "discarded")  # what an operator retry takes
CANCEL_STATES: tuple[JobState, ...] = ACTIVE_STATES  # what an operator cancel takes

PRIORITY_MIN, PRIORITY_MAX = -1_000, 1_000
PAYLOAD_VERSION = 1
# The error recorded for a job discarded because it was not started by its expiry (`expires_in`)
EXPIRED = "expired"


@dataclass(frozen=True, kw_only=True, slots=True)
class Window:
    """How an enqueue joins an earlier job of its name and `window_key` instead of writing one.

    A uniqueness window (`debounce` false): the newest such job enqueued within the last
    `seconds` that is in one of `states` is the enqueue's outcome, and nothing is written. A
    debounce: such a job that has not started (available or scheduled, no attempt spent) takes
    the new job's input, options and run time (no later than `max_wait_seconds` after its own
    enqueue, when given) and keeps its id; the new job's run time is already its enqueue's plus
    the period (catalog.py)."""

    seconds: float
    states: tuple[JobState, ...] = ()
    debounce: bool = False
    max_wait_seconds: float | None = None


# what a debounce may replace: a job not yet started
DEBOUNCED_STATES: tuple[JobState, ...] = ("available", "scheduled")


@dataclass(frozen=True, kw_only=True, slots=True)
class NewJob:
    """A job to persist. `run_at` None means now (the store's now) plus `delay_seconds`, which
    the store counts from its own now at the insert (never with a `run_at`); `payload` is JSON."""

    name: str
    queue: str = "default"
    payload: Mapping[str, Any] = field(default_factory=dict)
    payload_version: int = PAYLOAD_VERSION
    run_at: datetime | None = None
    delay_seconds: float = 0.0
    priority: int = 0
    max_attempts: int = 20
    unique_key: str | None = None
    company: str | None = None
    tick: datetime | None = None
    ticks_skipped: int | None = None
    tags: tuple[str, ...] = ()  # labels to find it by (`ket jobs list --tag`), in their order
    # the W3C trace context of its enqueue (`traceparent`, `tracestate`), when traced
    trace_context: Mapping[str, str] | None = None
    # not started within this many seconds of its run time: discarded as EXPIRED, never run
    expires_in_seconds: float | None = None
    # its keys under fleet-wide limits (`<name>|<key values as JSON>`): the concurrency one when
    # its job or queue has a concurrency limit, the rate one when its job has a rate limit
    concurrency_key: str | None = None
    rate_key: str | None = None
    # the key of its uniqueness window or debounce (`window`): the key fields' values as JSON,
    # or the enqueue's unique_key in their place
    window_key: str | None = None
    window: Window | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Inserted:
    """The outcome of one insert: the job's id, and whether it joined an active job's key."""

    id: JobId
    coalesced: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Rate:
    """At most `limit` attempts started in any span of `period_seconds`."""

    limit: int
    period_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class JobLimits:
    """A job's fleet-wide limits, each kept per its jobs' `concurrency_key` / `rate_key`."""

    concurrency: int | None = None
    rate: Rate | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimLimits:
    """The fleet-wide limits a claim of one queue keeps: its jobs' (by job name) and the queue's
    own (all its attempts together). The store serializes such claims of a queue, counts the
    running attempts and the starts within each rate's period, and passes over the jobs whose
    key is full, so that other keys flow."""

    jobs: Mapping[str, JobLimits] = field(default_factory=dict)
    concurrency: int | None = None
    rate: Rate | None = None

    @property
    def frees_on_end(self) -> bool:
        """Whether an attempt's end can let a held job start (a concurrency limit)."""
        return self.concurrency is not None or any(
            job.concurrency is not None for job in self.jobs.values()
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class JobClaim:
    """Claim up to `limit` due jobs of `queue` for `worker_id`, leased for `lease_seconds`,
    within the queue's fleet-wide `limits` (None: it has none)."""

    queue: str
    limit: int
    worker_id: str
    lease_seconds: float
    limits: ClaimLimits | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimedJob:
    """A job claimed under a lease: what a worker needs to run it, and its fence."""

    id: JobId
    name: str
    queue: str
    payload: dict[str, Any]
    payload_version: int
    priority: int
    attempt: int
    max_attempts: int
    unique_key: str | None
    company: str | None
    run_at: datetime
    enqueued_at: datetime
    lease_until: datetime
    fence: int
    tick: datetime | None
    ticks_skipped: int | None
    trace_context: dict[str, str] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorInfo:
    """What went wrong in an attempt; the store adds the attempt number and the time."""

    error: str
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ErrorRecord:
    """One entry of a job's error history, never lost: the attempt that failed, when it ended
    (`at`) and why; when it started and which worker ran it (None for a job that expired
    unstarted, and for entries recorded before migration 12)."""

    attempt: int
    at: datetime
    error: str
    traceback: str | None
    started_at: datetime | None = None
    worker_id: str | None = None


Outcome = Literal["completed", "retryable", "discarded", "snoozed", "cancelled"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Settle:
    """The outcome of an attempt, applied only if `fence` is still the row's fence.

    `retryable` and `snoozed` run again after `delay_seconds` (a snooze does not use up an
    attempt); `retryable`, `discarded` and `cancelled` append `error` to the history if given.
    `result`: a completion's result, the JSON text of an object (catalog.job_result), stored
    with it (a settlement refused stores nothing).
    """

    id: JobId
    fence: int
    outcome: Outcome
    delay_seconds: float = 0.0
    error: ErrorInfo | None = None
    result: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SettleResult:
    """Which settlements were applied, and which were refused (stale fence or not executing)."""

    applied: tuple[JobId, ...]
    refused: tuple[JobId, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Lease:
    """A claimed job a worker still holds: its id and the fence it was claimed with, and what
    its handler last reported with ctx.progress since the last heartbeat (the JSON text of an
    object; written with the lease when the lease is still held)."""

    id: JobId
    fence: int
    progress: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Heartbeat:
    """Extend the leases of running work to now + `lease_seconds`."""

    leases: Sequence[Lease]
    lease_seconds: float


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatResult:
    """Leases extended, leases lost (stale fence or no longer executing), cancels requested."""

    extended: tuple[JobId, ...]
    lost: tuple[JobId, ...]
    cancel_requested: tuple[JobId, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class Rescued:
    """An executing job whose lease expired, moved to `retryable` or `discarded`."""

    id: JobId
    name: str
    queue: str
    state: JobState
    attempt: int
    worker_id: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class StateChange:
    """The answer to an operator command: the state before and after (None: no such job)."""

    id: JobId
    previous: JobState | None
    state: JobState | None
    changed: bool
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class Look:
    """What a safety visit learns in one question (PacedStore.look): the seconds until the
    earliest lease of an executing job ends (None: none runs), and for each queue asked about
    that has runnable jobs, the seconds until its next one is due (0.0: one is due now)."""

    lease_end: float | None
    due: dict[str, float]


@dataclass(frozen=True, kw_only=True, slots=True)
class Prune:
    """Delete terminal jobs that finished more than `older_than_seconds` ago, `limit` at most."""

    older_than_seconds: float
    limit: int = 10_000
    states: tuple[JobState, ...] = TERMINAL_STATES


@dataclass(frozen=True, kw_only=True, slots=True)
class Vacuum:
    """Reclaim the jobs table's dead row versions once they number at least `threshold` plus
    `scale_factor` times its live rows (autovacuum's rule, with thresholds of the caller's)."""

    threshold: int = 1_000
    scale_factor: float = 0.05


# vacuumed; not_due: fewer dead row versions than asked for; not_permitted: the store's role may
# not vacuum the table; not_needed: the database keeps no dead row versions (SQLite)
VacuumOutcome = Literal["vacuumed", "not_due", "not_permitted", "not_needed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Vacuumed:
    """What a vacuum request did; the dead row versions counted before it and left after it."""

    outcome: VacuumOutcome
    dead_before: int = 0
    dead_after: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleState:
    """A schedule's state row: the fingerprint it was installed with and the last tick claimed."""

    schedule_id: str
    fingerprint: str
    last_tick: datetime
    paused: bool = False  # an operator's pause: no replica fires its ticks


@dataclass(frozen=True, kw_only=True, slots=True)
class QueuePause:
    """A paused queue of one tenant: no worker claims its jobs until it is resumed. Who paused
    it (`paused_by`: the operator, as the audit log names them) and when (the store's time)."""

    queue: str
    paused_at: datetime
    paused_by: str


@dataclass(frozen=True, kw_only=True, slots=True)
class TickClaim:
    """Move a schedule's state row from `expected` to (`fingerprint`, `tick`) by compare-and-set.

    `expected` None installs the row (the install tick never fires). Only if the row moved is
    `job` inserted, with a ledger entry recording `skipped`, in the same transaction.
    """

    schedule_id: str
    fingerprint: str
    tick: datetime
    expected: ScheduleState | None
    skipped: int = 0
    job: NewJob | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TickResult:
    """Whether this caller moved the row, and the job it enqueued if it fired one."""

    won: bool
    job: Inserted | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Fire:
    """One entry of a schedule's fire ledger."""

    schedule_id: str
    fingerprint: str
    tick: datetime
    skipped: int
    job_id: JobId
    fired_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class JobRecord:
    """One job in full, for tools, tests and the dashboard (payloads can hold secrets)."""

    id: JobId
    name: str
    queue: str
    state: JobState
    payload: dict[str, Any]
    payload_version: int
    priority: int
    attempt: int
    max_attempts: int
    unique_key: str | None
    company: str | None
    run_at: datetime
    enqueued_at: datetime
    attempted_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    lease_until: datetime | None
    fence: int
    cancel_requested: bool
    errors: tuple[ErrorRecord, ...]
    tick: datetime | None
    ticks_skipped: int | None
    tags: tuple[str, ...] = ()
    trace_context: dict[str, str] | None = None
    rerun_of: JobId | None = None  # the finished job this one reruns (`ket jobs rerun`)
    expires_at: datetime | None = None  # discarded as EXPIRED if not started by then
    window_key: str | None = None  # the key of its uniqueness window or debounce
    # what its handler returned, when its job keeps it (job_get only: a listing leaves it out)
    result: dict[str, Any] | None = None
    # what its handler last reported with ctx.progress: {"fraction": 0.4, "note": "..."}
    progress: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepRecord:
    """Record that the step `name` of job `id` finished with `value` (the JSON text of its
    value), if `fence` is still the job's and it is executing: an attempt that lost its job
    records nothing."""

    id: JobId
    fence: int
    name: str
    value: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Rerun:
    """Insert `job` as a rerun of `origin`, linked to it, if `origin` has finished (completed,
    discarded or cancelled); the check and the insert in one transaction."""

    origin: JobId
    job: NewJob


@dataclass(frozen=True, kw_only=True, slots=True)
class Reran:
    """What a rerun did: `origin`'s state (None: no such job) and the job inserted for it (None:
    refused, `reason` says why; coalesced: an active job holds its unique key, nothing linked)."""

    origin: JobId
    state: JobState | None
    inserted: Inserted | None
    reason: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class JobQuery:
    """Filter and page for listing, newest first.

    Each filter is a collection of values a job matches when it has any one of them (a tag:
    when it carries any one of `tags`); an empty one matches every job. The filters given
    combine: a job is listed when it matches every one. JobFilter selects the same way.
    """

    states: tuple[JobState, ...] = ()
    queues: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    limit: int = 50
    offset: int = 0
    unique_key: str | None = None  # the jobs enqueued with this unique key, finished ones too


BulkAction = Literal["retry", "cancel"]
BULK_BATCH = 1_000  # rows per transaction of a bulk retry or cancel


@dataclass(frozen=True, kw_only=True, slots=True)
class JobFilter:
    """The jobs a bulk retry or cancel acts on: every given filter holds.

    `states`, `queues`, `names` and `tags` select as JobQuery's do (any one of the values; empty:
    any job), except that `states` are states the action applies to (empty: all of them,
    RETRY_STATES or CANCEL_STATES); `enqueued_before` keeps jobs enqueued before that instant;
    the ids are in (`after_id`, `through_id`], and among `ids` when it names some (the rows an
    operator ticked). A cancel never matches an executing job that already carries a cancel
    request: there is nothing left to do to it.
    """

    action: BulkAction
    states: tuple[JobState, ...] = ()
    queues: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    enqueued_before: datetime | None = None
    after_id: JobId = 0
    through_id: JobId | None = None
    ids: tuple[JobId, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkCount:
    """How many jobs match a filter, the first `sample` of them (lowest ids first), and the
    highest matching id (None: no match)."""

    count: int
    sample: tuple[JobRecord, ...]
    last_id: JobId | None


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkBatch:
    """Apply `filter.action` to the first `limit` matching jobs, lowest ids first, in one
    transaction."""

    filter: JobFilter
    limit: int = BULK_BATCH


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkApplied:
    """What one batch did: the jobs changed, the matching jobs left alone (each with its reason),
    and the highest id the batch looked at, from which the next batch goes on (None: no job
    matched, the work is done)."""

    changed: tuple[StateChange, ...]
    skipped: tuple[StateChange, ...]
    last_id: JobId | None


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStats:
    """Counts by (state, queue), and the ages operators watch, in seconds (None: no such job);
    where the database keeps them (PostgreSQL), the jobs table's dead and live row versions and
    the transactions held open on the database for long (they keep dead rows from a vacuum)."""

    counts: Mapping[tuple[JobState, str], int]
    oldest_lease_age: float | None
    oldest_available_age: float | None
    dead_rows: int | None = None
    live_rows: int | None = None
    long_transactions: tuple[OpenTransaction, ...] = ()
    # the two ages per queue, for the queues that have a due or an executing job
    queue_ages: Mapping[str, QueueAges] = field(default_factory=dict)
    # per queue, the discarded jobs still kept that expired unstarted (`expires_in`)
    expired: Mapping[str, int] = field(default_factory=dict)
    # per queue with fleet-wide limits (when the stats were asked with them), the due jobs a
    # limit holds back: counted among `available` (and the other runnable states) too
    limited: Mapping[str, int] = field(default_factory=dict)
    # per queue, the jobs discarded within the last hour (DISCARDED_WITHIN) of the store's now
    discarded_last_hour: Mapping[str, int] = field(default_factory=dict)


DISCARDED_WITHIN = timedelta(hours=1)  # JobStats.discarded_last_hour counts this far back


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueAges:
    """One queue's ages, in seconds (None: no such job): how long its oldest lease has been
    held, and how long its oldest due job has waited."""

    oldest_lease_age: float | None
    oldest_available_age: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenTransaction:
    """A transaction open on the tenant database for long: its server process, its age in
    seconds, its state (`idle in transaction`, `active`) and the client's application name."""

    pid: int
    seconds: float
    state: str | None
    application: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelTable:
    """A declared model as the store keeps it: `<module>.<Model>` and its shorthand field types.

    Every row also has an `id` the store generates (a string).
    """

    name: str
    fields: Mapping[str, str]


Where = Mapping[str, Any]
"""Equality filters on a model's fields, all of which must hold (`{"status": "pending"}`)."""


AuditAction = Literal["retry", "cancel", "enqueue", "rerun", "pause", "resume"]
AUDIT_ACTIONS: tuple[AuditAction, ...] = ("retry", "cancel", "enqueue", "rerun", "pause", "resume")
MAX_AUDIT_TEXT = 2_000  # characters of an audit entry's subject or detail


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    """An operator's retry, cancel, enqueue, rerun, or pause or resume of a queue, for the
    tenant's audit log: who (`subject`, through `source`: `dashboard`, `api`, `cli`), what
    (`action` on one `job_id`, or on what `selection` names: the filter as JSON, or the
    `queue`) and what came of it (`matched`,
    `changed`, `skipped`, and a `detail` for people, such as `discarded -> available`)."""

    subject: str
    source: str
    action: AuditAction
    job_id: JobId | None = None
    selection: Mapping[str, Any] = field(default_factory=dict)
    matched: int = 0
    changed: int = 0
    skipped: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    """An entry of the audit log as stored: its id, the store's time `at`, and the entry."""

    id: int
    at: datetime
    entry: AuditEntry


@dataclass(frozen=True, kw_only=True, slots=True)
class DashboardSession:
    """A dashboard sign-in, kept in the tenant's store until it expires or is signed out: whom
    it admits (`subject`, `company`, `permissions`, as the authenticator said at sign-in), by
    `key`, a digest of the session's secret (the store never holds the secret itself). The
    store sets `expires_at` when it opens one."""

    key: str
    subject: str
    company: str | None = None
    permissions: tuple[str, ...] = ()
    expires_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditQuery:
    """A page of the audit log, newest first; with `job_id`, the entries of that one job only
    (its retries, cancels, enqueue and reruns; a bulk action names a filter, not its jobs)."""

    limit: int = 50
    offset: int = 0
    job_id: JobId | None = None


# How long the per-minute counts are kept (MinuteStore), and how far back a count reaches for
# jobs that finished late behind it: the dashboard charts the last day.
MINUTES_KEPT = timedelta(days=2)


@dataclass(frozen=True, kw_only=True, slots=True)
class JobMinute:
    """One queue's jobs in one minute (MinuteStore): how many were enqueued, completed,
    failed and retried (`failed`: an attempt that ended in an error and was tried again; the
    last attempt of a job that gives up counts in `discarded`), discarded and cancelled in it;
    and, when the minute was sampled, how many due jobs waited (`available`) and how long the
    oldest of them had waited (None: not sampled in that minute)."""

    minute: datetime
    queue: str
    enqueued: int = 0
    completed: int = 0
    failed: int = 0
    discarded: int = 0
    cancelled: int = 0
    available: int | None = None
    oldest_available_ms: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class JobMinutes:
    """What a MinuteQuery found: its minutes, and the instant up to which every count is in
    (`counted_until`; None before the second count): a minute that ends after it is not whole
    yet, what finished late in it is still to be counted."""

    minutes: tuple[JobMinute, ...]
    counted_until: datetime | None


@dataclass(frozen=True, kw_only=True, slots=True)
class MinuteQuery:
    """The minutes that begin from `since` (inclusive) to `until` (exclusive; None: every
    minute up to now, the current one included), in minute order, then queue order."""

    since: datetime
    until: datetime | None = None
