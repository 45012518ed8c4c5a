"""ket's tables in each tenant database: the one schema source the queries use.

The migrations in `migration.py` build the same schema step by step; a test proves a database
migrated from nothing equals one created from this metadata.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    and_,
    false,
    literal_column,
)

from ket.store.sql.column import Id, Instant, Json
from ket.store.types import (
    ACTIVE_STATES,
    AUDIT_ACTIONS,
    EXPIRED,
    JOB_STATES,
    RUNNABLE_STATES,
    TERMINAL_STATES,
)

metadata = MetaData()


def _states(states: tuple[str, ...]) -> str:
    return ", ".join(f"'{s}'" for s in states)


jobs = Table(
    "ket_jobs",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("name", Text, nullable=False),
    Column("queue", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("priority", Integer, nullable=False),
    Column("payload", Json, nullable=False),
    Column("payload_version", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("unique_key", Text),
    Column("company", Text),
    Column("run_at", Instant, nullable=False),
    Column("enqueued_at", Instant, nullable=False),
    Column("attempted_at", Instant),
    Column("finished_at", Instant),
    Column("worker_id", Text),
    Column("lease_until", Instant),
    Column("fence", BigInteger, nullable=False),
    Column("cancel_requested", Boolean, nullable=False),
    Column("tick", Instant),
    Column("ticks_skipped", Integer),
    Column("tags", Json),  # a JSON array of strings; NULL when the job has none
    Column("trace_context", Json),  # the W3C trace context of its enqueue, when traced
    Column("rerun_of", BigInteger),  # the finished job this one reruns (`ket jobs rerun`)
    Column("expires_at", Instant),  # not started by then: discarded as expired (`expires_in`)
    # its keys under fleet-wide limits (types.NewJob): attempts are counted by them
    Column("concurrency_key", Text),
    Column("rate_key", Text),
    # the key of its uniqueness window or debounce (types.NewJob.window_key)
    Column("window_key", Text),
    # what its handler last reported with ctx.progress (written by heartbeats; migration 15)
    Column("progress", Json),
    CheckConstraint(f"state IN ({_states(JOB_STATES)})", name="ket_jobs_state"),
    sqlite_autoincrement=True,
)

# The predicates are literal SQL (not bound parameters) so that PostgreSQL can match a query's
# WHERE to a partial index's predicate when it plans the statement.
RUNNABLE = jobs.c.state.in_([literal_column(f"'{s}'") for s in RUNNABLE_STATES])
ACTIVE = jobs.c.state.in_([literal_column(f"'{s}'") for s in ACTIVE_STATES])
TERMINAL = jobs.c.state.in_([literal_column(f"'{s}'") for s in TERMINAL_STATES])
EXECUTING = jobs.c.state == literal_column("'executing'")
UNIQUE_ACTIVE = and_(jobs.c.unique_key.is_not(None), ACTIVE)

# The claim path: due runnable rows of a queue in claim order. Heartbeats update only
# lease_until, which no index holds, so they stay HOT updates on PostgreSQL.
Index(
    "ket_jobs_runnable",
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=RUNNABLE,
    sqlite_where=RUNNABLE,
)
Index(
    "ket_jobs_unique_active",
    jobs.c.name,
    jobs.c.unique_key,
    unique=True,
    postgresql_where=UNIQUE_ACTIVE,
    sqlite_where=UNIQUE_ACTIVE,
)
WINDOWED = jobs.c.window_key.is_not(None)
Index(
    "ket_jobs_window",
    jobs.c.name,
    jobs.c.window_key,
    jobs.c.enqueued_at,
    postgresql_where=WINDOWED,
    sqlite_where=WINDOWED,
)
Index("ket_jobs_executing", jobs.c.id, postgresql_where=EXECUTING, sqlite_where=EXECUTING)
Index(
    "ket_jobs_finished",
    jobs.c.finished_at,
    postgresql_where=TERMINAL,
    sqlite_where=TERMINAL,
)

# Runnable jobs that can expire, for the claim that discards the expired ones of its queue;
# jobs with no expiry stay out of the index.
EXPIRING = and_(jobs.c.expires_at.is_not(None), RUNNABLE)
Index(
    "ket_jobs_expiring",
    jobs.c.queue,
    jobs.c.expires_at,
    postgresql_where=EXPIRING,
    sqlite_where=EXPIRING,
)

# A job's reruns (`ket jobs show`); the few rows that rerun another are all it holds.
RERUN = jobs.c.rerun_of.is_not(None)
Index("ket_jobs_rerun_of", jobs.c.rerun_of, postgresql_where=RERUN, sqlite_where=RERUN)
# the jobs of a unique key, finished ones too, for an operator's search (migration 11)
Index(
    "ket_jobs_unique_key",
    jobs.c.unique_key,
    postgresql_where=jobs.c.unique_key.is_not(None),
    sqlite_where=jobs.c.unique_key.is_not(None),
)
# the jobs discarded lately, for the stats (few rows: those that gave up; migration 11)
DISCARDED = jobs.c.state == literal_column("'discarded'")
Index(
    "ket_jobs_discarded",
    jobs.c.finished_at,
    postgresql_where=DISCARDED,
    sqlite_where=DISCARDED,
)

# Tag filters (`@>`) on PostgreSQL; untagged rows stay out of the index. SQLite scans: its
# filters read each row's array with json_each.
Index(
    "ket_jobs_tags",
    jobs.c.tags,
    postgresql_using="gin",
    postgresql_ops={"tags": "jsonb_path_ops"},
    postgresql_where=jobs.c.tags.is_not(None),
).ddl_if(dialect="postgresql")

job_errors = Table(
    "ket_job_errors",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("job_id", BigInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("at", Instant, nullable=False),
    Column("error", Text, nullable=False),
    Column("traceback", Text),
    # when the failed attempt started, and the worker that ran it (migration 12)
    Column("started_at", Instant),
    Column("worker_id", Text),
    sqlite_autoincrement=True,
)
Index("ket_job_errors_job", job_errors.c.job_id, job_errors.c.id)
# The expired jobs' records, which stats count (an expiry records one per job)
EXPIRED_ERROR = job_errors.c.error == literal_column(f"'{EXPIRED}'")
Index(
    "ket_job_errors_expired",
    job_errors.c.job_id,
    postgresql_where=EXPIRED_ERROR,
    sqlite_where=EXPIRED_ERROR,
)

schedules = Table(
    "ket_schedules",
    metadata,
    Column("schedule_id", Text, primary_key=True),
    Column("fingerprint", Text, nullable=False),
    Column("last_tick", Instant, nullable=False),
    Column("updated_at", Instant, nullable=False),
    # an operator's pause: every replica's sweep leaves the schedule's ticks unfired
    Column("paused", Boolean, nullable=False, server_default=false()),
)

schedule_fires = Table(
    "ket_schedule_fires",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("schedule_id", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("tick", Instant, nullable=False),
    Column("skipped", Integer, nullable=False),
    Column("job_id", BigInteger, nullable=False),
    Column("fired_at", Instant, nullable=False),
    sqlite_autoincrement=True,
)
Index("ket_schedule_fires_schedule", schedule_fires.c.schedule_id, schedule_fires.c.tick)

# The sent ledger: one row per outbound message key, claimed before the send, sent after it.
sent_messages = Table(
    "ket_sent_messages",
    metadata,
    Column("key", Text, primary_key=True),
    Column("state", Text, nullable=False),
    Column("claimed_at", Instant, nullable=False),
    Column("sent_at", Instant),
    CheckConstraint("state IN ('claimed', 'sent')", name="ket_sent_messages_state"),
)

# The audit log: who retried, cancelled, enqueued or reran what, from the dashboard or the CLI
# (append only).
audit = Table(
    "ket_audit",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", Instant, nullable=False),
    Column("subject", Text, nullable=False),
    Column("source", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("job_id", BigInteger),
    Column("selection", Json, nullable=False),
    Column("matched", BigInteger, nullable=False),
    Column("changed", BigInteger, nullable=False),
    Column("skipped", BigInteger, nullable=False),
    Column("detail", Text, nullable=False),
    CheckConstraint(f"action IN ({_states(AUDIT_ACTIONS)})", name="ket_audit_action"),
    sqlite_autoincrement=True,
)
# one job's entries, for its page (migration 11)
Index(
    "ket_audit_job",
    audit.c.job_id,
    postgresql_where=audit.c.job_id.is_not(None),
    sqlite_where=audit.c.job_id.is_not(None),
)

# The dashboard's sign-in sessions, by a digest of each one's secret (never the secret)
sessions = Table(
    "ket_sessions",
    metadata,
    Column("key", Text, primary_key=True),
    Column("subject", Text, nullable=False),
    Column("company", Text),
    Column("permissions", Json, nullable=False),
    Column("opened_at", Instant, nullable=False),
    Column("expires_at", Instant, nullable=False),
    Index("ket_sessions_expires", "expires_at"),
)

# What a completed job's handler returned, when its job declares an output: one row per job,
# written with its completion, gone with its job
job_results = Table(
    "ket_job_results",
    metadata,
    Column("job_id", BigInteger, primary_key=True, autoincrement=False),
    Column("result", Json, nullable=False),
)

# The durable steps of a job's handler that finished (ctx.step): one row per job and step name,
# written under the attempt's fence, gone with its job
job_steps = Table(
    "ket_job_steps",
    metadata,
    Column("job_id", BigInteger, primary_key=True, autoincrement=False),
    Column("name", Text, primary_key=True),
    Column("value", Json, nullable=False),
    Column("at", Instant, nullable=False),
)

# The starts under rate limits, per queue and scope (a job's rate key, or RATE_QUEUE for the
# queue's own rate), `n` at a time: a claim counts those within each rate's period
rate_starts = Table(
    "ket_rate_starts",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("queue", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("at", Instant, nullable=False),
    Column("n", Integer, nullable=False),
    sqlite_autoincrement=True,
)
Index("ket_rate_starts_queue", rate_starts.c.queue, rate_starts.c.at)
Index("ket_rate_starts_scope", rate_starts.c.queue, rate_starts.c.scope, rate_starts.c.at)

# The paused queues: no claim takes a job of a queue with a row here (ket queues pause)
queue_pauses = Table(
    "ket_queue_pauses",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("paused_at", Instant, nullable=False),
    Column("paused_by", Text, nullable=False),
)

# Jobs per minute and queue, for the dashboard's charts (migration 12): counted from the jobs
# table once a minute (ket.store.sql.minute), the backlog sampled then; kept two days
job_minutes = Table(
    "ket_job_minutes",
    metadata,
    Column("minute", Instant, primary_key=True),
    Column("queue", Text, primary_key=True),
    Column("enqueued", BigInteger, nullable=False, server_default="0"),
    Column("completed", BigInteger, nullable=False, server_default="0"),
    Column("failed", BigInteger, nullable=False, server_default="0"),
    Column("discarded", BigInteger, nullable=False, server_default="0"),
    Column("cancelled", BigInteger, nullable=False, server_default="0"),
    Column("available", BigInteger),  # the due jobs waiting when the minute was sampled
    Column("oldest_available_ms", BigInteger),  # how long the oldest of them had waited
)

# Where the per-minute counts stand (one row): the jobs and errors up to `counted_*` are
# counted; those up to `seen_*` were committed a count ago and are counted next, so that an
# insert that committed late, behind a later id, is not passed over
minute_cursor = Table(
    "ket_minute_cursor",
    metadata,
    Column("one", Integer, primary_key=True, autoincrement=False),
    Column("counted_job_id", BigInteger, nullable=False),
    Column("counted_error_id", BigInteger, nullable=False),
    Column("counted_at", Instant, nullable=False),
    Column("seen_job_id", BigInteger, nullable=False),
    Column("seen_error_id", BigInteger, nullable=False),
    Column("seen_at", Instant, nullable=False),
    CheckConstraint("one = 1", name="ket_minute_cursor_one"),
)

migrations = Table(
    "ket_migrations",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", Text, nullable=False),
    Column("applied_at", Instant, nullable=False),
)
