"""Versioned, idempotent schema migrations, applied in order and recorded in ket_migrations.

Each migration is plain DDL per dialect, frozen once released: a later change to the schema is a
new migration, never an edit of an old one. `schema.py` must always equal the result of applying
all of them (a test proves it), because the queries are written against `schema.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, insert, inspect, select, text

from ket.store.sql.schema import migrations as migrations_table


@dataclass(frozen=True, kw_only=True)
class Migration:
    """One schema step: DDL statements per dialect name."""

    version: int
    name: str
    statements: Mapping[str, tuple[str, ...]]


_STATES = (
    "'available', 'scheduled', 'executing', 'retryable', 'completed', 'discarded', 'cancelled'"
)
_RUNNABLE = "state IN ('available', 'scheduled', 'retryable')"
_ACTIVE = "state IN ('available', 'scheduled', 'executing', 'retryable')"
_TERMINAL = "state IN ('completed', 'discarded', 'cancelled')"


def _v1(id_type: str, instant: str, json: str, bigint: str, boolean: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE ket_jobs (
            id {id_type},
            name TEXT NOT NULL,
            queue TEXT NOT NULL,
            state TEXT NOT NULL,
            priority INTEGER NOT NULL,
            payload {json} NOT NULL,
            payload_version INTEGER NOT NULL,
            attempt INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            unique_key TEXT,
            company TEXT,
            run_at {instant} NOT NULL,
            enqueued_at {instant} NOT NULL,
            attempted_at {instant},
            finished_at {instant},
            worker_id TEXT,
            lease_until {instant},
            fence {bigint} NOT NULL,
            cancel_requested {boolean} NOT NULL,
            tick {instant},
            ticks_skipped INTEGER,
            CONSTRAINT ket_jobs_state CHECK (state IN ({_STATES}))
        )""",
        f"CREATE INDEX ket_jobs_runnable ON ket_jobs (queue, priority, run_at, id) "
        f"WHERE {_RUNNABLE}",
        f"CREATE UNIQUE INDEX ket_jobs_unique_active ON ket_jobs (name, unique_key) "
        f"WHERE unique_key IS NOT NULL AND {_ACTIVE}",
        "CREATE INDEX ket_jobs_executing ON ket_jobs (id) WHERE state = 'executing'",
        f"CREATE INDEX ket_jobs_finished ON ket_jobs (finished_at) WHERE {_TERMINAL}",
        f"""CREATE TABLE ket_job_errors (
            id {id_type},
            job_id {bigint} NOT NULL,
            attempt INTEGER NOT NULL,
            at {instant} NOT NULL,
            error TEXT NOT NULL,
            traceback TEXT
        )""",
        "CREATE INDEX ket_job_errors_job ON ket_job_errors (job_id, id)",
        f"""CREATE TABLE ket_schedules (
            schedule_id TEXT NOT NULL PRIMARY KEY,
            fingerprint TEXT NOT NULL,
            last_tick {instant} NOT NULL,
            updated_at {instant} NOT NULL
        )""",
        f"""CREATE TABLE ket_schedule_fires (
            id {id_type},
            schedule_id TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            tick {instant} NOT NULL,
            skipped INTEGER NOT NULL,
            job_id {bigint} NOT NULL,
            fired_at {instant} NOT NULL
        )""",
        "CREATE INDEX ket_schedule_fires_schedule ON ket_schedule_fires (schedule_id, tick)",
        f"""CREATE TABLE ket_sent_messages (
            key TEXT NOT NULL PRIMARY KEY,
            state TEXT NOT NULL,
            claimed_at {instant} NOT NULL,
            sent_at {instant},
            CONSTRAINT ket_sent_messages_state CHECK (state IN ('claimed', 'sent'))
        )""",
    )


# One NOTIFY per queue that got available work, per statement; PostgreSQL delivers it at commit
# and folds repeats within a transaction. A trigger covers every insert path, the application's
# own SQL included, without a round trip of its own.
_PG_NOTIFY = (
    """CREATE FUNCTION ket_jobs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('ket_jobs', queue)
        FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS woken;
        RETURN NULL;
    END
    $$""",
    """CREATE TRIGGER ket_jobs_notify AFTER INSERT ON ket_jobs
    REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION ket_jobs_notify()""",
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        version=1,
        name="jobs, job errors, schedules, the fire ledger and the sent ledger",
        statements={
            "postgresql": _v1(
                "BIGSERIAL NOT NULL PRIMARY KEY",
                "TIMESTAMP WITH TIME ZONE",
                "JSONB",
                "BIGINT",
                "BOOLEAN",
            )
            + _PG_NOTIFY,
            # AUTOINCREMENT: ids are never reused, even after pruning the newest rows
            "sqlite": _v1(
                "INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT", "BIGINT", "JSON", "BIGINT", "BOOLEAN"
            ),
        },
    ),
)
MIGRATIONS += (
    Migration(
        version=2,
        name="schedules can be paused",
        statements={
            "postgresql": (
                "ALTER TABLE ket_schedules ADD COLUMN paused BOOLEAN NOT NULL DEFAULT false",
            ),
            "sqlite": ("ALTER TABLE ket_schedules ADD COLUMN paused BOOLEAN NOT NULL DEFAULT 0",),
        },
    ),
)
MIGRATIONS += (
    Migration(
        version=3,
        name="jobs carry tags",
        statements={
            "postgresql": (
                "ALTER TABLE ket_jobs ADD COLUMN tags JSONB",
                "CREATE INDEX ket_jobs_tags ON ket_jobs USING gin (tags jsonb_path_ops) "
                "WHERE tags IS NOT NULL",
            ),
            "sqlite": ("ALTER TABLE ket_jobs ADD COLUMN tags JSON",),
        },
    ),
)
MIGRATIONS += (
    Migration(
        version=4,
        name="jobs carry the trace context of their enqueue",
        statements={
            "postgresql": ("ALTER TABLE ket_jobs ADD COLUMN trace_context JSONB",),
            "sqlite": ("ALTER TABLE ket_jobs ADD COLUMN trace_context JSON",),
        },
    ),
)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def _v5(id_type: str, instant: str, json: str) -> tuple[str, ...]:
    return (_audit("ket_audit", id_type, instant, json, ("retry", "cancel")),)


def _audit(table: str, id_type: str, instant: str, json: str, actions: tuple[str, ...]) -> str:
    return f"""CREATE TABLE {table} (
            id {id_type},
            at {instant} NOT NULL,
            subject TEXT NOT NULL,
            source TEXT NOT NULL,
            action TEXT NOT NULL,
            job_id BIGINT,
            selection {json} NOT NULL,
            matched BIGINT NOT NULL,
            changed BIGINT NOT NULL,
            skipped BIGINT NOT NULL,
            detail TEXT NOT NULL,
            CONSTRAINT ket_audit_action CHECK (action IN ({_quoted(actions)}))
        )"""


MIGRATIONS += (
    Migration(
        version=5,
        name="the audit log of operators' retries and cancels",
        statements={
            "postgresql": _v5(
                "BIGSERIAL NOT NULL PRIMARY KEY", "TIMESTAMP WITH TIME ZONE", "JSONB"
            ),
            "sqlite": _v5("INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT", "BIGINT", "JSON"),
        },
    ),
)
# A job may rerun a finished one (its `rerun_of`, indexed for the few rows that hold one), and
# the audit log takes enqueues and reruns. SQLite cannot change a CHECK constraint in place: its
# audit table is rebuilt, rows and ids kept.
_RERUN_OF = (
    "ALTER TABLE ket_jobs ADD COLUMN rerun_of BIGINT",
    "CREATE INDEX ket_jobs_rerun_of ON ket_jobs (rerun_of) WHERE rerun_of IS NOT NULL",
)
_V6_ACTIONS = ("retry", "cancel", "enqueue", "rerun")
_AUDIT_COLUMNS = (
    "id, at, subject, source, action, job_id, selection, matched, changed, skipped, detail"
)
MIGRATIONS += (
    Migration(
        version=6,
        name="jobs remember the job they rerun; the audit log records enqueues and reruns",
        statements={
            "postgresql": (
                *_RERUN_OF,
                "ALTER TABLE ket_audit DROP CONSTRAINT ket_audit_action",
                "ALTER TABLE ket_audit ADD CONSTRAINT ket_audit_action "
                f"CHECK (action IN ({_quoted(_V6_ACTIONS)}))",
            ),
            "sqlite": (
                *_RERUN_OF,
                _audit(
                    "ket_audit_v6",
                    "INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT",
                    "BIGINT",
                    "JSON",
                    _V6_ACTIONS,
                ),
                f"INSERT INTO ket_audit_v6 ({_AUDIT_COLUMNS}) "
                f"SELECT {_AUDIT_COLUMNS} FROM ket_audit",
                "DROP TABLE ket_audit",
                "ALTER TABLE ket_audit_v6 RENAME TO ket_audit",
            ),
        },
    ),
)


def _v7(instant: str, json: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE ket_sessions (
            key TEXT NOT NULL PRIMARY KEY,
            subject TEXT NOT NULL,
            company TEXT,
            permissions {json} NOT NULL,
            opened_at {instant} NOT NULL,
            expires_at {instant} NOT NULL
        )""",
        "CREATE INDEX ket_sessions_expires ON ket_sessions (expires_at)",
    )


MIGRATIONS += (
    Migration(
        version=7,
        name="the dashboard's sign-in sessions",
        statements={
            "postgresql": _v7("TIMESTAMP WITH TIME ZONE", "JSONB"),
            "sqlite": _v7("BIGINT", "JSON"),
        },
    ),
)
# Queues an operator paused, and the audit log records pauses and resumes (SQLite rebuilds its
# audit table again, as in version 6).
_V8_ACTIONS = (*_V6_ACTIONS, "pause", "resume")


def _v8_pauses(instant: str) -> str:
    return f"""CREATE TABLE ket_queue_pauses (
            queue TEXT NOT NULL PRIMARY KEY,
            paused_at {instant} NOT NULL,
            paused_by TEXT NOT NULL
        )"""


MIGRATIONS += (
    Migration(
        version=8,
        name="paused queues; the audit log records pauses and resumes",
        statements={
            "postgresql": (
                _v8_pauses("TIMESTAMP WITH TIME ZONE"),
                "ALTER TABLE ket_audit DROP CONSTRAINT ket_audit_action",
                "ALTER TABLE ket_audit ADD CONSTRAINT ket_audit_action "
                f"CHECK (action IN ({_quoted(_V8_ACTIONS)}))",
            ),
            "sqlite": (
                _v8_pauses("BIGINT"),
                _audit(
                    "ket_audit_v8",
                    "INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT",
                    "BIGINT",
                    "JSON",
                    _V8_ACTIONS,
                ),
                f"INSERT INTO ket_audit_v8 ({_AUDIT_COLUMNS}) "
                f"SELECT {_AUDIT_COLUMNS} FROM ket_audit",
                "DROP TABLE ket_audit",
                "ALTER TABLE ket_audit_v8 RENAME TO ket_audit",
            ),
        },
    ),
)


def _v9(id_type: str, instant: str) -> tuple[str, ...]:
    return (
        f"ALTER TABLE ket_jobs ADD COLUMN expires_at {instant}",
        "ALTER TABLE ket_jobs ADD COLUMN concurrency_key TEXT",
        "ALTER TABLE ket_jobs ADD COLUMN rate_key TEXT",
        f"""CREATE TABLE ket_rate_starts (
            id {id_type},
            queue TEXT NOT NULL,
            scope TEXT NOT NULL,
            at {instant} NOT NULL,
            n INTEGER NOT NULL
        )""",
        "CREATE INDEX ket_rate_starts_queue ON ket_rate_starts (queue, at)",
        "CREATE INDEX ket_jobs_expiring ON ket_jobs (queue, expires_at) "
        f"WHERE expires_at IS NOT NULL AND {_RUNNABLE}",
        "CREATE INDEX ket_job_errors_expired ON ket_job_errors (job_id) WHERE error = 'expired'",
    )


MIGRATIONS += (
    Migration(
        version=9,
        name="jobs that expire unstarted (expires_in); keys and starts under fleet-wide limits",
        statements={
            "postgresql": _v9("BIGSERIAL NOT NULL PRIMARY KEY", "TIMESTAMP WITH TIME ZONE"),
            "sqlite": _v9("INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT", "BIGINT"),
        },
    ),
)
# The key of a job's uniqueness window or debounce (types.NewJob.window_key), indexed for the
# few rows that hold one: an enqueue looks for the earlier job of its name and key.
_WINDOW_KEY = (
    "ALTER TABLE ket_jobs ADD COLUMN window_key TEXT",
    "CREATE INDEX ket_jobs_window ON ket_jobs (name, window_key, enqueued_at) "
    "WHERE window_key IS NOT NULL",
)
MIGRATIONS += (
    Migration(
        version=10,
        name="jobs keyed by a uniqueness window or a debounce",
        statements={"postgresql": _WINDOW_KEY, "sqlite": _WINDOW_KEY},
    ),
)
# PostgreSQL: a claim within fleet-wide limits as one statement (sql/limit.py), so that it costs
# one round trip in autocommit, as the plain claim does, not a transaction of five. The rule is
# ket.store.admission's, step by step (SQLite and the memory store run that module); the
# conformance kit's area `limits` holds the two to the same behaviour. The queue's limited
# claims run one at a time (the advisory lock), and count from the clock once it is held. Every
# claimed row, then one row with no job, carry `contended` and `retry_at` (admission.Admitted);
# the claimed rows may carry NULL there, the last row is the one read.
#
# Each statement of a function costs its own start (and its plan: the function's are made once
# a connection), and a statement that writes a table costs the opening of its indexes even when
# it writes nothing: a claim whose limits are far from reached runs as few as it can, and
# writes only what it has to. Its due jobs are claimed in one statement when every limit lets
# all of them start (_claim_all); only when one does not fit does the walk admit them one by
# one, as admission.Counts.admit does. Claimed rows are found again by `id = ANY (ARRAY(...))`,
# which the primary key serves whatever the number (a join, planned without it, may not).
#
# Migrations 11, 13 and 14 all make the function from this one text: a database that applied an
# earlier text gets this one from the next of them, a fresh database already at 11.

# the columns a claim returns (query.claimed_job), as a function declares them
_COLUMNS = """
    id BIGINT, name TEXT, queue TEXT, payload JSONB, payload_version INTEGER, priority INTEGER,
    attempt INTEGER, max_attempts INTEGER, unique_key TEXT, company TEXT,
    run_at TIMESTAMP WITH TIME ZONE, enqueued_at TIMESTAMP WITH TIME ZONE,
    lease_until TIMESTAMP WITH TIME ZONE, fence BIGINT, tick TIMESTAMP WITH TIME ZONE,
    ticks_skipped INTEGER, trace_context JSONB"""
# a claim function's language and settings
_SETTINGS = """LANGUAGE plpgsql
-- each statement's plan is made once a connection, without the parameters' values (planned
-- again at every call, as a statement with parameters is by default when the values change
-- its cost, the statements took longer to plan than to run), and every plan reads by index
-- (a plan made while a table was small must not read it whole once it is large; and each
-- statement is written so that an index serves it whatever its parameters' values). The
-- running attempts are read through ket_jobs_executing, whose entries of attempts that
-- ended stay until a vacuum: a plain index scan marks them dead as it passes (a bitmap scan
-- reads every one again at each claim, a millisecond after a few thousand jobs)
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off"""
# the due jobs in claim order, locked
_DUE = """SELECT j.id, j.name, j.concurrency_key AS ck, j.rate_key AS rk,
                   j.priority, j.run_at FROM ket_jobs j
            WHERE j.queue = p_queue AND j.state IN ('available', 'scheduled', 'retryable')
              AND j.run_at <= v_now{after}
              AND NOT EXISTS (SELECT 1 FROM ket_queue_pauses p WHERE p.queue = p_queue)
              AND (j.expires_at IS NULL OR j.expires_at > v_now)
{keys}
            ORDER BY j.priority, j.run_at, j.id
            LIMIT p_limit FOR UPDATE SKIP LOCKED"""
# ... of a limited claim: past the concurrency keys at their limit
_KEYS = """
              AND (j.concurrency_key IS NULL OR NOT j.concurrency_key = ANY (v_full_c))"""
# where the walk's last read ended
_AFTER = "(v_after_p, v_after_r, v_after_id)"
# a claimed job's new values, and the columns a claim returns (query.claimed_job)
_CLAIMED = """state = 'executing', attempt = j.attempt + 1,
            worker_id = p_worker_id, attempted_at = v_now,
            lease_until = coalesce(p_lease_at, v_now + p_lease_s * interval '1 second'),
            fence = j.fence + 1, cancel_requested = false"""
_RETURNED = """j.id, j.name, j.queue, j.payload, j.payload_version, j.priority, j.attempt,
            j.max_attempts, j.unique_key, j.company, j.run_at, j.enqueued_at, j.lease_until,
            j.fence, j.tick, j.ticks_skipped, j.trace_context"""
# a scope's starts added to the record of their tenth of its rate's period (admission.bucket_of),
# or a new record (the claims of the queue take turns): _INSERTED ends a statement whose WITH
# holds `counted` (scope, n, tenth) and then _ADDED
_ADDED = """added AS (
            UPDATE ket_rate_starts s SET n = s.n + counted.n FROM counted
            WHERE s.queue = p_queue AND s.scope = counted.scope AND s.at = counted.tenth
            RETURNING s.scope
        )"""
_INSERTED = """INSERT INTO ket_rate_starts (queue, scope, at, n)
        SELECT p_queue, counted.scope, counted.tenth, counted.n FROM counted
        WHERE counted.scope NOT IN (SELECT added.scope FROM added)"""


# the queue's expired jobs discarded, and why, when there are any (a statement that writes a
# table costs the opening of its indexes, even when it writes nothing)
_EXPIRE = """    IF EXISTS (SELECT 1 FROM ket_jobs e
               WHERE e.queue = p_queue AND e.expires_at IS NOT NULL
                 AND e.state IN ('available', 'scheduled', 'retryable')
                 AND e.expires_at <= v_now) THEN
        WITH expiring AS (
            SELECT e.id FROM ket_jobs e
            WHERE e.queue = p_queue AND e.expires_at IS NOT NULL
              AND e.state IN ('available', 'scheduled', 'retryable') AND e.expires_at <= v_now
            ORDER BY e.expires_at, e.id LIMIT p_limit FOR UPDATE SKIP LOCKED
        ), expired AS (
            UPDATE ket_jobs j SET state = 'discarded', finished_at = v_now, lease_until = NULL,
                cancel_requested = false
            WHERE j.id = ANY (ARRAY(SELECT expiring.id FROM expiring))
            RETURNING j.id, j.attempt
        )
        INSERT INTO ket_job_errors (job_id, attempt, at, error)
        SELECT expired.id, expired.attempt, v_now, 'expired' FROM expired;
    END IF;"""


def _claim_all(rated: bool) -> str:
    """The first p_limit due jobs claimed in one statement when every limit lets all of them
    start, none otherwise; with `rated`, the starts of each rate scope (and the queue's) read
    and, when claimed, recorded in the same statement."""
    scopes = rate_fits = recorded = ""
    if rated:
        scopes = """, by_scope AS (  -- the candidates of each rate scope, and its starts in period
            SELECT s.rk, s.n, s.rate, s.width, (
                SELECT coalesce(sum(r.n), 0) FROM ket_rate_starts r
                WHERE r.queue = p_queue AND r.scope = s.rk
                  AND r.at > v_now - s.period * interval '1 second'
                      - s.width * interval '1 microsecond') AS started
            FROM (SELECT c.rk, count(*) AS n, min(l.rate) AS rate, min(l.period) AS period,
                         min(l.width) AS width
                  FROM candidate c JOIN limited l ON l.name = c.name
                  WHERE l.rate IS NOT NULL AND c.rk <> '' GROUP BY c.rk) AS s
        )"""
        rate_fits = """
                   AND NOT EXISTS (SELECT 1 FROM by_scope s WHERE s.started + s.n > s.rate)"""
        recorded = f""", counted AS (
            SELECT t.scope, t.n::INTEGER AS n,
                   to_timestamp(0) + v_now_us / t.width * t.width * interval '1 microsecond'
                       AS tenth
            FROM (SELECT s.rk AS scope, s.n, s.width FROM by_scope s
                  UNION ALL
                  SELECT '*', (SELECT count(*) FROM candidate),
                         greatest(round(p_queue_period * 100000)::BIGINT, 1)
                  WHERE p_queue_rate IS NOT NULL) AS t
            WHERE t.n > 0 AND (SELECT f.ok FROM fits f)
        ), {_ADDED}, recorded AS (
            {_INSERTED}
        )"""
    return f"""RETURN QUERY
        WITH candidate AS (
            {_DUE.format(after="", keys=_KEYS)}
        ), limited AS (
            SELECT l.name, l.lim, l.rate, l.period,
                   greatest(round(l.period * 100000)::BIGINT, 1) AS width
            FROM unnest(p_names, p_concurrency, p_rate, p_period) AS l(name, lim, rate, period)
        ), by_key AS (  -- the candidates of each concurrency key that has a limit
            SELECT c.ck, count(*) AS n, min(l.lim) AS lim
            FROM candidate c JOIN limited l ON l.name = c.name
            WHERE l.lim IS NOT NULL AND c.ck <> '' GROUP BY c.ck
        ){scopes}, fits AS (
            SELECT (SELECT count(*) FROM candidate) <= v_room
                   AND NOT EXISTS (
                       SELECT 1 FROM by_key k
                       WHERE coalesce((v_running->>k.ck)::BIGINT, 0) + k.n > k.lim){rate_fits}
                   AS ok
        ){recorded}
        UPDATE ket_jobs j SET {_CLAIMED}
        WHERE j.id = ANY (ARRAY(SELECT c.id FROM candidate c)) AND (SELECT f.ok FROM fits f)
        RETURNING {_RETURNED}, NULL::BOOLEAN, NULL::TIMESTAMP WITH TIME ZONE;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;"""


_PG_LIMITED_CLAIM = (
    """CREATE OR REPLACE FUNCTION ket_limited_claim(
    p_queue TEXT, p_limit INTEGER, p_worker_id TEXT, p_now TIMESTAMP WITH TIME ZONE,
    p_lease_s DOUBLE PRECISION, p_lease_at TIMESTAMP WITH TIME ZONE,
    p_names TEXT[], p_concurrency BIGINT[], p_rate BIGINT[], p_period DOUBLE PRECISION[],
    p_queue_concurrency BIGINT, p_queue_rate BIGINT, p_queue_period DOUBLE PRECISION)
RETURNS TABLE (@COLUMNS@,
    contended BOOLEAN, retry_at TIMESTAMP WITH TIME ZONE)
@SETTINGS@
AS $$
#variable_conflict use_column
DECLARE
    v_now TIMESTAMP WITH TIME ZONE;
    v_longest DOUBLE PRECISION;  -- the longest rate period (NULL: no rate)
    v_kept TIMESTAMP WITH TIME ZONE;
    v_now_us BIGINT;  -- now, in microseconds from the Unix epoch
    v_running JSONB := '{}';  -- by concurrency key: the queue's executing attempts
    v_total BIGINT := 0;      -- all of them
    v_full_c TEXT[] := '{}';  -- the concurrency keys at their job's limit
    v_started JSONB := '{}';  -- by rate scope met: the starts within its rate's period
    v_oldest JSONB := '{}';   -- by rate scope met: when the first of those leaves it
    v_width INTERVAL;
    v_frees TIMESTAMP WITH TIME ZONE;
    v_claimed BIGINT := 0;  -- the jobs claimed all at once (then the walk claims none)
    v_seen BIGINT := 0;  -- the candidates the walk met: due jobs whose keys were not full
    v_read BIGINT;       -- the due jobs one read returned
    v_after_p INTEGER := -2147483648;  -- where the last read ended, in claim order
    v_after_r TIMESTAMP WITH TIME ZONE := '-infinity';
    v_after_id BIGINT := 0;
    v_room BIGINT := 9223372036854775807;
    v_mine JSONB := '{}';    -- by concurrency key: the attempts the walk starts
    v_starts JSONB := '{}';  -- by rate scope: the starts the walk records
    v_held TEXT[] := '{}';   -- the rate scopes that held a job back
    v_ids BIGINT[] := '{}';  -- the jobs the walk admits
    v_contended BOOLEAN;
    v_retry TIMESTAMP WITH TIME ZONE;
    v_own_period TIMESTAMP WITH TIME ZONE;  -- a held rate whose starts are all this claim's
    v_i INTEGER;
    v_n BIGINT;
    c RECORD;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('ket limits ' || p_queue, 0));
    v_now := coalesce(p_now, clock_timestamp());
    -- the longest period, and its tenth: older starts count no more (admission.kept_since)
    IF p_queue_rate IS NOT NULL OR array_remove(p_rate, NULL) <> '{}' THEN
        v_longest := greatest(
            (SELECT max(l.period) FROM unnest(p_rate, p_period) AS l(rate, period)
             WHERE l.rate IS NOT NULL),
            CASE WHEN p_queue_rate IS NOT NULL THEN p_queue_period END);
        v_kept := v_now - v_longest * interval '1 second'
            - greatest(round(v_longest * 100000)::BIGINT, 1) * interval '1 microsecond';
    END IF;
    v_now_us := (extract(epoch FROM v_now) * 1000000)::BIGINT;

@EXPIRE@
    -- the running attempts by concurrency key, all of them, and the keys at their job's limit,
    -- when a concurrency limit counts them
    IF p_queue_concurrency IS NOT NULL OR array_remove(p_concurrency, NULL) <> '{}' THEN
        WITH running AS (
            SELECT j.concurrency_key AS k, count(*) AS n FROM ket_jobs j
            WHERE j.queue = p_queue AND j.state = 'executing'
            GROUP BY j.concurrency_key
        )
        SELECT coalesce((SELECT jsonb_object_agg(r.k, r.n) FROM running r
                         WHERE r.k IS NOT NULL), '{}'),
               coalesce((SELECT sum(r.n) FROM running r), 0),
               coalesce((SELECT array_agg(r.k) FROM running r
                         JOIN unnest(p_names, p_concurrency) AS l(name, lim)
                           ON l.name = split_part(r.k, '|', 1)
                         WHERE l.lim IS NOT NULL AND r.n >= l.lim), '{}')
        INTO v_running, v_total, v_full_c;
    END IF;

    IF v_longest IS NOT NULL THEN  -- the starts past every period count no more
        IF EXISTS (SELECT 1 FROM ket_rate_starts s
                   WHERE s.queue = p_queue AND s.at <= v_kept) THEN
            DELETE FROM ket_rate_starts s WHERE s.queue = p_queue AND s.at <= v_kept;
        END IF;
    END IF;
    -- the queue's own starts within its rate's period, and when the first of those leaves it
    -- (admission.counts_at, admission.frees_at)
    IF p_queue_rate IS NOT NULL THEN
        v_width := greatest(round(p_queue_period * 100000)::BIGINT, 1) * interval '1 microsecond';
        SELECT coalesce(sum(s.n), 0), min(s.at) + v_width + p_queue_period * interval '1 second'
        INTO v_n, v_frees
        FROM ket_rate_starts s
        WHERE s.queue = p_queue AND s.scope = '*'
          AND s.at > v_now - p_queue_period * interval '1 second' - v_width;
        v_started := v_started || jsonb_build_object('*', v_n);
        v_oldest := v_oldest || jsonb_build_object('*', v_frees);
    END IF;

    v_contended := cardinality(v_full_c) > 0;

    IF p_queue_concurrency IS NOT NULL THEN
        v_room := least(v_room, p_queue_concurrency - v_total);
    END IF;
    IF p_queue_rate IS NOT NULL THEN
        v_room := least(v_room, p_queue_rate - coalesce((v_started->>'*')::BIGINT, 0));
    END IF;

    -- the common case, limits far from reached: every due job of the first p_limit claimed
    IF v_room > 0 THEN
        IF v_longest IS NULL THEN
            @CLAIM_ALL@
        ELSE
            @CLAIM_ALL_RATED@
        END IF;
    END IF;

    -- else the walk: the due jobs in claim order, p_limit at a time from where the last read
    -- ended, each admitted that every limit allows (a scope found full passes its jobs over:
    -- the next read goes on past them)
    WHILE v_claimed = 0 AND v_room > 0 AND v_seen < p_limit AND cardinality(v_ids) < p_limit
    LOOP
        v_read := 0;
        FOR c IN
            @DUE_AFTER@
        LOOP
            v_read := v_read + 1;
            v_after_p := c.priority;
            v_after_r := c.run_at;
            v_after_id := c.id;
            EXIT WHEN v_seen >= p_limit OR cardinality(v_ids) >= p_limit OR v_room <= 0;
            v_i := array_position(p_names, c.name);
            IF v_i IS NOT NULL AND p_rate[v_i] IS NOT NULL AND c.rk <> '' THEN
                IF NOT v_started ? c.rk THEN  -- its scope's records, read once a claim
                    v_width := greatest(round(p_period[v_i] * 100000)::BIGINT, 1)
                        * interval '1 microsecond';
                    SELECT coalesce(sum(s.n), 0),
                           min(s.at) + v_width + p_period[v_i] * interval '1 second'
                    INTO v_n, v_frees
                    FROM ket_rate_starts s
                    WHERE s.queue = p_queue AND s.scope = c.rk
                      AND s.at > v_now - p_period[v_i] * interval '1 second' - v_width;
                    v_started := v_started || jsonb_build_object(c.rk, v_n);
                    v_oldest := v_oldest || jsonb_build_object(c.rk, v_frees);
                END IF;
                -- full before this claim: no candidate (other keys' jobs take its turn)
                CONTINUE WHEN (v_started->>c.rk)::BIGINT >= p_rate[v_i];
            END IF;
            v_seen := v_seen + 1;
            IF v_i IS NOT NULL AND p_concurrency[v_i] IS NOT NULL AND c.ck <> '' THEN
                IF coalesce((v_running->>c.ck)::BIGINT, 0) + coalesce((v_mine->>c.ck)::BIGINT, 0)
                        >= p_concurrency[v_i] THEN
                    v_contended := true;
                    CONTINUE;
                END IF;
            END IF;
            IF v_i IS NOT NULL AND p_rate[v_i] IS NOT NULL AND c.rk <> '' THEN
                v_n := coalesce((v_starts->>c.rk)::BIGINT, 0);
                IF coalesce((v_started->>c.rk)::BIGINT, 0) + v_n >= p_rate[v_i] THEN
                    v_held := v_held || c.rk;
                    CONTINUE;
                END IF;
                v_starts := v_starts || jsonb_build_object(c.rk, v_n + 1);
            END IF;
            IF c.ck IS NOT NULL THEN
                v_mine := v_mine || jsonb_build_object(
                    c.ck, coalesce((v_mine->>c.ck)::BIGINT, 0) + 1);
            END IF;
            v_ids := v_ids || c.id;
            v_room := v_room - 1;
        END LOOP;
        EXIT WHEN v_read < p_limit;  -- no due job left past these
    END LOOP;

    v_n := v_claimed + cardinality(v_ids);  -- the jobs this claim starts
    IF p_queue_rate IS NOT NULL AND v_n > 0 THEN
        v_starts := v_starts || jsonb_build_object('*', v_n);
    END IF;
    IF p_queue_rate IS NOT NULL AND coalesce((v_started->>'*')::BIGINT, 0)
            + coalesce((v_starts->>'*')::BIGINT, 0) >= p_queue_rate THEN
        v_held := v_held || '*'::TEXT;
    END IF;
    IF p_queue_concurrency IS NOT NULL AND v_total + v_n >= p_queue_concurrency THEN
        v_contended := true;
    END IF;
    IF cardinality(v_held) > 0 THEN  -- when the first start of a held rate leaves its period
        SELECT min((v_oldest->>h.scope)::TIMESTAMP WITH TIME ZONE),
               min(h.tenth + h.width + h.period * interval '1 second')
        INTO v_retry, v_own_period
        FROM (SELECT s.scope, s.period, s.width * interval '1 microsecond' AS width,
                     to_timestamp(0) + v_now_us / s.width * s.width * interval '1 microsecond'
                         AS tenth
              FROM (SELECT DISTINCT u.scope, p.period,
                           greatest(round(p.period * 100000)::BIGINT, 1) AS width
                    FROM unnest(v_held) AS u(scope)
                    CROSS JOIN LATERAL (SELECT CASE WHEN u.scope = '*' THEN p_queue_period
                                                    ELSE p_period[array_position(p_names,
                                                         split_part(u.scope, '|', 1))]
                                               END AS period) AS p) AS s) AS h;
        v_retry := coalesce(v_retry, v_own_period);
    END IF;

    IF cardinality(v_ids) > 0 AND v_starts <> '{}' THEN  -- the walk's starts recorded
        WITH counted AS (
            SELECT t.k AS scope, t.n::INTEGER AS n,
                   to_timestamp(0) + v_now_us / w.width * w.width * interval '1 microsecond'
                       AS tenth
            FROM jsonb_each_text(v_starts) AS t(k, n)
            CROSS JOIN LATERAL (
                SELECT greatest(round(CASE WHEN t.k = '*' THEN p_queue_period
                                           ELSE p_period[array_position(p_names,
                                                split_part(t.k, '|', 1))]
                                      END * 100000)::BIGINT, 1) AS width) AS w
        ), @ADDED@
        @INSERTED@;
    END IF;
    IF cardinality(v_ids) > 0 THEN
        RETURN QUERY
        UPDATE ket_jobs j SET @CLAIMED@
        WHERE j.id = ANY (v_ids)
        RETURNING @RETURNED@, v_contended, v_retry;
    END IF;
    RETURN QUERY SELECT NULL::BIGINT, NULL::TEXT, NULL::TEXT, NULL::JSONB, NULL::INTEGER,
        NULL::INTEGER, NULL::INTEGER, NULL::INTEGER, NULL::TEXT, NULL::TEXT,
        NULL::TIMESTAMP WITH TIME ZONE, NULL::TIMESTAMP WITH TIME ZONE,
        NULL::TIMESTAMP WITH TIME ZONE, NULL::BIGINT, NULL::TIMESTAMP WITH TIME ZONE,
        NULL::INTEGER, NULL::JSONB, v_contended, v_retry;
END
$$""".replace("@COLUMNS@", _COLUMNS)
    .replace("@SETTINGS@", _SETTINGS)
    .replace("@EXPIRE@", _EXPIRE)
    .replace("@CLAIM_ALL@", _claim_all(rated=False))
    .replace("@CLAIM_ALL_RATED@", _claim_all(rated=True))
    .replace(
        "@DUE_AFTER@",
        _DUE.format(
            after="\n              AND (j.priority, j.run_at, j.id) > " + _AFTER, keys=_KEYS
        ),
    )
    .replace("@ADDED@", _ADDED)
    .replace("@INSERTED@", _INSERTED)
    .replace("@CLAIMED@", _CLAIMED)
    .replace("@RETURNED@", _RETURNED)
)

# PostgreSQL: a claim (query.py, `claim`), as a function for its plans, made once a connection
# (_SETTINGS): the queue's expired jobs discarded, and why, then its first `p_limit` due jobs
# claimed. One round trip in autocommit, as the statement it replaces (migration 14).
_PG_CLAIM = (
    """CREATE OR REPLACE FUNCTION ket_claim(
    p_queue TEXT, p_limit INTEGER, p_worker_id TEXT, p_now TIMESTAMP WITH TIME ZONE,
    p_lease_s DOUBLE PRECISION, p_lease_at TIMESTAMP WITH TIME ZONE)
RETURNS TABLE (@COLUMNS@)
@SETTINGS@
AS $$
#variable_conflict use_column
DECLARE
    v_now TIMESTAMP WITH TIME ZONE := coalesce(p_now, now());
BEGIN
@EXPIRE@
    RETURN QUERY
    WITH due AS (
        @DUE@
    )
    UPDATE ket_jobs j SET @CLAIMED@
    WHERE j.id = ANY (ARRAY(SELECT due.id FROM due))
    RETURNING @RETURNED@;
END
$$""".replace("@COLUMNS@", _COLUMNS)
    .replace("@SETTINGS@", _SETTINGS)
    .replace("@EXPIRE@", _EXPIRE)
    .replace("@DUE@", _DUE.format(after="", keys=""))
    .replace("@CLAIMED@", _CLAIMED)
    .replace("@RETURNED@", _RETURNED)
)

# One job's entries of the audit log, for its page on the dashboard.
_AUDIT_JOB = "CREATE INDEX ket_audit_job ON ket_audit (job_id) WHERE job_id IS NOT NULL"
# The jobs discarded lately (JobStats.discarded_last_hour): only jobs that gave up are in it.
_DISCARDED = "CREATE INDEX ket_jobs_discarded ON ket_jobs (finished_at) WHERE state = 'discarded'"
# An operator's search by unique key, finished jobs too (the unique index holds active ones).
_UNIQUE_KEY = (
    "CREATE INDEX ket_jobs_unique_key ON ket_jobs (unique_key) WHERE unique_key IS NOT NULL"
)
MIGRATIONS += (
    Migration(
        version=11,
        name="a claim within fleet-wide limits in one statement (PostgreSQL); one job's audit; "
        "the jobs discarded lately; the jobs of a unique key",
        statements={
            "postgresql": (_PG_LIMITED_CLAIM, _AUDIT_JOB, _DISCARDED, _UNIQUE_KEY),
            "sqlite": (_AUDIT_JOB, _DISCARDED, _UNIQUE_KEY),
        },
    ),
)


# The dashboard's charts: jobs per minute and queue, and where their counting stands; and each
# failed attempt's start and worker, for the job page.
def _v12(instant: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE ket_job_minutes (
            minute {instant} NOT NULL,
            queue TEXT NOT NULL,
            enqueued BIGINT NOT NULL DEFAULT 0,
            completed BIGINT NOT NULL DEFAULT 0,
            failed BIGINT NOT NULL DEFAULT 0,
            discarded BIGINT NOT NULL DEFAULT 0,
            cancelled BIGINT NOT NULL DEFAULT 0,
            available BIGINT,
            oldest_available_ms BIGINT,
            PRIMARY KEY (minute, queue)
        )""",
        f"""CREATE TABLE ket_minute_cursor (
            one INTEGER NOT NULL PRIMARY KEY,
            counted_job_id BIGINT NOT NULL,
            counted_error_id BIGINT NOT NULL,
            counted_at {instant} NOT NULL,
            seen_job_id BIGINT NOT NULL,
            seen_error_id BIGINT NOT NULL,
            seen_at {instant} NOT NULL,
            CONSTRAINT ket_minute_cursor_one CHECK (one = 1)
        )""",
        f"ALTER TABLE ket_job_errors ADD COLUMN started_at {instant}",
        "ALTER TABLE ket_job_errors ADD COLUMN worker_id TEXT",
    )


MIGRATIONS += (
    Migration(
        version=12,
        name="jobs per minute and queue, for the dashboard's charts; each failed attempt's "
        "start and worker",
        statements={
            "postgresql": _v12("TIMESTAMP WITH TIME ZONE"),
            "sqlite": _v12("BIGINT"),
        },
    ),
)
# A limited claim reads the starts of its candidates' rate scopes only (ket_limited_claim, made
# again: it read every start of the longest period at each claim), by the scope's index.
_RATE_SCOPE = "CREATE INDEX ket_rate_starts_scope ON ket_rate_starts (queue, scope, at)"
MIGRATIONS += (
    Migration(
        version=13,
        name="a limited claim reads the starts of its candidates' rate scopes only",
        statements={"postgresql": (_RATE_SCOPE, _PG_LIMITED_CLAIM), "sqlite": (_RATE_SCOPE,)},
    ),
)
# A claim is a function, ket_claim, whose plans are made once a connection (the statement it
# replaces was planned at every call); a limited claim whose limits are far from reached claims
# its jobs in one statement, and its plans too are made once a connection (ket_limited_claim,
# made again: it planned its statements at every call, and walked every job). SQLite has
# nothing to change.
MIGRATIONS += (
    Migration(
        version=14,
        name="claims run plans made once a connection; a limited claim far from its limits "
        "claims in one statement",
        statements={"postgresql": (_PG_LIMITED_CLAIM, _PG_CLAIM), "sqlite": ()},
    ),
)


# What a completed job's handler returned, when its job declares an output (ket_job_results),
# what a running one last reported with ctx.progress (ket_jobs.progress), and the durable steps
# its handler finished (ket_job_steps).
def _v15(payload: str, instant: str) -> tuple[str, ...]:
    return (
        f"""CREATE TABLE ket_job_results (
            job_id BIGINT NOT NULL PRIMARY KEY,
            result {payload} NOT NULL
        )""",
        f"ALTER TABLE ket_jobs ADD COLUMN progress {payload}",
        f"""CREATE TABLE ket_job_steps (
            job_id BIGINT NOT NULL,
            name TEXT NOT NULL,
            value {payload} NOT NULL,
            at {instant} NOT NULL,
            PRIMARY KEY (job_id, name)
        )""",
    )


MIGRATIONS += (
    Migration(
        version=15,
        name="the results of completed jobs; the progress running jobs report; durable steps",
        statements={
            "postgresql": _v15("JSONB", "TIMESTAMP WITH TIME ZONE"),
            "sqlite": _v15("JSON", "BIGINT"),
        },
    ),
)
LATEST = MIGRATIONS[-1].version

_LEDGER = {
    "postgresql": "CREATE TABLE IF NOT EXISTS ket_migrations (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at TIMESTAMP WITH TIME ZONE NOT NULL)",
    "sqlite": "CREATE TABLE IF NOT EXISTS ket_migrations (version INTEGER PRIMARY KEY, "
    "name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
}
# Any constant works; it only has to be the same for every process migrating this database.
_PG_LOCK = 0x6B6574


def migrate(connection: Connection) -> list[int]:
    """Apply the missing migrations in one transaction; returns the versions applied.

    Safe to run concurrently from several processes: on PostgreSQL an advisory lock serialises
    them, on SQLite the write lock does; the loser finds nothing left to do.
    """
    dialect = connection.dialect.name
    if dialect not in _LEDGER:
        raise ValueError(f"ket stores support postgresql and sqlite, not {dialect!r}")
    if dialect == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    connection.execute(text(_LEDGER[dialect]))
    applied = set(connection.execute(select(migrations_table.c.version)).scalars())
    done: list[int] = []
    for migration in MIGRATIONS:
        if migration.version in applied:
            continue
        for statement in migration.statements[dialect]:
            connection.execute(text(statement))
        connection.execute(
            insert(migrations_table).values(
                version=migration.version, name=migration.name, applied_at=datetime.now(UTC)
            )
        )
        done.append(migration.version)
    return done


def schema_version(connection: Connection) -> int:
    """The newest applied migration, 0 when the database has none."""
    if not inspect(connection).has_table("ket_migrations"):
        return 0
    versions = connection.execute(select(migrations_table.c.version)).scalars().all()
    return max(versions, default=0)


# Everything the migrations create, dropped by `ket uninstall` (the app's model tables are its
# data and stay). On PostgreSQL the NOTIFY trigger goes with its table, and its function after.
KET_TABLES = (
    "ket_job_steps",
    "ket_job_results",
    "ket_job_minutes",
    "ket_minute_cursor",
    "ket_rate_starts",
    "ket_queue_pauses",
    "ket_sessions",
    "ket_audit",
    "ket_job_errors",
    "ket_schedule_fires",
    "ket_schedules",
    "ket_sent_messages",
    "ket_jobs",
    "ket_migrations",
)


def uninstall(connection: Connection, *, control: bool = True) -> list[str]:
    """Drop ket's tables (those that exist) in one transaction; returns the tables dropped.

    With `control`, the control tables too (control_migration.py: the workers' roster, which a
    single-tenant app keeps in its one database); without it they stay, for a database that is
    also the registry's, where the workers of every tenant meet.
    """
    from ket.control.migration import CONTROL_TABLES

    dialect = connection.dialect.name
    if dialect not in _LEDGER:
        raise ValueError(f"ket stores support postgresql and sqlite, not {dialect!r}")
    if dialect == "postgresql":  # not while a `ket migrate` runs
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})
    present = set(inspect(connection).get_table_names())
    wanted = KET_TABLES + (CONTROL_TABLES if control else ())
    dropped = [name for name in wanted if name in present]
    for name in dropped:
        connection.execute(text(f"DROP TABLE {name}"))
    if dialect == "postgresql":
        connection.execute(text("DROP FUNCTION IF EXISTS ket_jobs_notify()"))
        connection.execute(text("DROP FUNCTION IF EXISTS ket_limited_claim"))
        connection.execute(text("DROP FUNCTION IF EXISTS ket_claim"))
    return dropped
