"""Handles on the SQL store's fixed statements, usable with or without SQLAlchemy.

Every statement is written once, as SQLAlchemy Core, in the module of its group (query.py,
insert.py, ledger.py, vacuum.py, control.py). The store's operations name a statement by its
handle and run it on a `fetch.Rows`, which resolves the handle on its side:

- on an engine connection (SQLite, a caller's own connection, the operator commands) to the
  SQLAlchemy statement, built once per dialect (`built`; this imports SQLAlchemy);
- on the PostgreSQL lane to its PostgreSQL text, generated ahead of time into postgres_text.py
  (`python3 -m ket.store.sql.generation --write`; a test fails when that file is stale), so that
  a worker that never needs the engine never imports SQLAlchemy.

Statements whose shape would vary with their input (a list of ids, of states) take arrays on
PostgreSQL (`= ANY(:ids)`, `unnest`), so that each has one text, prepared once.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ket.store.types import ClaimedJob


@dataclass(frozen=True, slots=True)
class Statement:
    """A handle on one fixed statement: the field `name` of its `group`'s statements
    (`settle.<outcome>` for an entry of a dict field); `postgres` False for SQLite's own."""

    group: str
    name: str
    postgres: bool = True

    @property
    def key(self) -> str:
        """`group.name`: the statement's key in postgres_text.TEXT."""
        return f"{self.group}.{self.name}"


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement as PostgreSQL text, with the values SQLAlchemy bound into it."""

    text: str
    constants: dict[str, Any]
    returning: bool  # it returns rows

    def params(self, given: dict[str, Any] | None) -> dict[str, Any]:
        if not self.constants:  # psycopg only reads the parameters: no copy needed
            return given or {}
        return {**self.constants, **given} if given else dict(self.constants)


# where each group's statements are built: module and function(dialect)
BUILDERS = {
    "query": ("ket.store.sql.query", "statements"),
    "insert": ("ket.store.sql.insert", "insert_sql"),
    "ledger": ("ket.store.sql.ledger", "statements"),
    "vacuum": ("ket.store.sql.vacuum", "statements"),
    "control": ("ket.control.tables", "statements"),
    "minute": ("ket.store.sql.minute", "statements"),
}


def _query(name: str, *, postgres: bool = True) -> Statement:
    return Statement("query", name, postgres)


SETTLE_OUTCOMES = ("completed", "retryable", "discarded", "snoozed", "cancelled")

CLAIM = _query("claim")
# SQLite's: PostgreSQL's claims (plain and limited) discard expired jobs themselves
EXPIRE = _query("expire", postgres=False)
EXPIRED_ERRORS = _query("expired_errors", postgres=False)
LIMITED_CLAIM = _query("limited_claim")  # PostgreSQL only: the function ket_limited_claim
LIMIT_COUNTS = _query("limit_counts")
LIMIT_WAITING = _query("limit_waiting")
# SQLite's steps of a limited claim (PostgreSQL's function takes them all)
LIMIT_RUNNING = _query("limit_running", postgres=False)
LIMIT_STARTS = _query("limit_starts", postgres=False)
LIMIT_CANDIDATES = _query("limit_candidates", postgres=False)
LIMIT_CLAIM = _query("limit_claim", postgres=False)
RATE_RECORD = _query("rate_record", postgres=False)
RATE_FORGET = _query("rate_forget", postgres=False)
COMPLETE_MANY = _query("complete_many")
SETTLE = {outcome: _query(f"settle.{outcome}") for outcome in SETTLE_OUTCOMES}
APPEND_ERRORS = _query("append_errors")
STORE_RESULT = _query("store_result")
SET_PROGRESS = _query("set_progress")
STEPS_OF = _query("steps_of")
STEP_RECORD = _query("step_record")
HEARTBEAT = _query("heartbeat")
RESCUE = _query("rescue")
GRACE = _query("grace")  # parameter `lease_at`: every executing lease ends no sooner
LOCK_JOB = _query("lock_job")
CANCEL_NOW = _query("cancel_now")
REQUEST_CANCEL = _query("request_cancel")
MAKE_AVAILABLE = _query("make_available")
ACTIVE_HOLDERS = _query("active_holders")
PRUNABLE = _query("prunable")
PRUNE_ERRORS = _query("prune_errors")
PRUNE_RESULTS = _query("prune_results")
PRUNE_STEPS = _query("prune_steps")
PRUNE_JOBS = _query("prune_jobs")
SCHEDULE_STATES = _query("schedule_states")
SCHEDULE_INSTALL = _query("schedule_install")
SCHEDULE_MOVE = _query("schedule_move")
SCHEDULE_PAUSE = _query("schedule_pause")
SCHEDULE_FIRES = _query("schedule_fires")
RECORD_FIRE = _query("record_fire")
COUNTS = _query("counts")
EXPIRED = _query("expired")
DISCARDED_RECENT = _query("discarded_recent")  # parameter `p_since`
OLDEST = _query("oldest")
QUEUE_AGES = _query("queue_ages")  # parameter `now`: the instant OLDEST answered
CLOCK = _query("clock")  # the database's now (or the test clock's, passed as `now`)
NEXT_DUE = _query("next_due")  # parameter `p_queue`
LEASE_END = _query("lease_end")
LOOK = _query("look")  # PostgreSQL only (the safety visit): parameter `p_queues`
NOTIFY = _query("notify")  # PostgreSQL only: SQLite has no NOTIFY (see `wakes_by_notify`)

INSERT_PLAIN = Statement("insert", "plain")
INSERT_IGNORING_UNIQUE = Statement("insert", "ignoring_unique")
INSERT_HOLDER = Statement("insert", "holder")
INSERT_UNNESTED = Statement("insert", "unnested")  # PostgreSQL: a batch as arrays
INSERT_LAST_ID = Statement("insert", "last_id", postgres=False)  # SQLite numbers rows itself
INSERT_NUMBERED = Statement("insert", "numbered", postgres=False)
INSERT_TICKED = Statement("insert", "ticked")  # PostgreSQL: a tick, its job and its fire
INSERT_WINDOW_LOCK = Statement("insert", "window_lock")  # PostgreSQL: a window key's lock
INSERT_WINDOW_HOLDER = Statement("insert", "window_holder")
INSERT_DEBOUNCED = Statement("insert", "debounced")

LEDGER_CLAIM = Statement("ledger", "claim")
LEDGER_CONFIRM = Statement("ledger", "confirm")
LEDGER_RELEASE = Statement("ledger", "release")
LEDGER_SENT = Statement("ledger", "sent")

VACUUM_STATE = Statement("vacuum", "state")
VACUUM_RUN = Statement("vacuum", "run")
VACUUM_OPEN_TRANSACTIONS = Statement("vacuum", "open_transactions")

# the per-minute counts of the dashboard's charts (minute.py)
MINUTE_CURSOR = Statement("minute", "cursor")
MINUTE_START = Statement("minute", "start")
MINUTE_MARKS = Statement("minute", "marks")
MINUTE_ENQUEUED = Statement("minute", "enqueued")
MINUTE_FINISHED = Statement("minute", "finished")
MINUTE_FAILED = Statement("minute", "failed")
MINUTE_BACKLOG = Statement("minute", "backlog")
MINUTE_ADD = Statement("minute", "add")
MINUTE_ADVANCE = Statement("minute", "advance")
MINUTE_PRUNE = Statement("minute", "prune")
MINUTE_LISTING = Statement("minute", "listing")
MINUTE_COUNTED = Statement("minute", "counted")

# the control database's (control.py): the worker roster and its schema's ledger
WORKER_REPORT = Statement("control", "report")
WORKER_FORGET = Statement("control", "forget")
WORKER_LIST = Statement("control", "listing")
WORKER_REMOVE = Statement("control", "remove")
WORKER_TABLE = Statement("control", "present")  # a row when ket_workers exists
CONTROL_VERSION = Statement("control", "version")
CONTROL_APPLIED = Statement("control", "applied")

ALL: tuple[Statement, ...] = tuple(
    value
    for item in list(globals().values())
    for value in (item.values() if isinstance(item, dict) else (item,))
    if isinstance(value, Statement)
)


@functools.cache
def built(statement: Statement, dialect: str) -> Any:
    """The SQLAlchemy statement behind `statement` in `dialect` (imports SQLAlchemy)."""
    module, function = BUILDERS[statement.group]
    statements = getattr(importlib.import_module(module), function)(dialect)
    field, _, entry = statement.name.partition(".")
    value = getattr(statements, field)
    return value[entry] if entry else value


def wakes_by_notify(dialect: str) -> bool:
    """Whether the database wakes other processes' workers with NOTIFY (PostgreSQL)."""
    return dialect == "postgresql"


def pairs(dialect: str, given: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """The parameters naming (id, fence) pairs for COMPLETE_MANY and HEARTBEAT: two arrays on
    PostgreSQL (one text whatever their number), an expanding IN of pairs on SQLite."""
    if dialect == "postgresql":
        return {"ids": [p[0] for p in given], "fences": [p[1] for p in given]}
    return {"pairs": list(given)}


def claimed_job(row: Any) -> ClaimedJob:
    """A CLAIM row (its fields in query._CLAIMED order) as a ClaimedJob."""
    return ClaimedJob(
        id=row[0],
        name=row[1],
        queue=row[2],
        payload=row[3],
        payload_version=row[4],
        priority=row[5],
        attempt=row[6],
        max_attempts=row[7],
        unique_key=row[8],
        company=row[9],
        run_at=row[10],
        enqueued_at=row[11],
        lease_until=row[12],
        fence=row[13],
        tick=row[14],
        ticks_skipped=row[15],
        trace_context=row[16],
    )
