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
    return dropped
