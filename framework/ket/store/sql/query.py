"""The SQL store's statements, built once per dialect, and their rows as contract types.

Every statement here is a constant: values, times included, arrive as named parameters (see
now.py). The store names them by their handles (statement.py); the engine compiles each once,
the PostgreSQL lane runs their generated text (postgres_text.py), prepared on the server. A
changed or added statement needs `python3 -m ket.store.sql.generation --write`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Integer,
    Text,
    and_,
    any_,
    bindparam,
    case,
    column,
    delete,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    tuple_,
    type_coerce,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from ket.store.sql.column import Instant
from ket.store.sql.insert import CHANNEL
from ket.store.sql.now import TimeSql
from ket.store.sql.schema import (
    ACTIVE,
    EXECUTING,
    EXPIRED_ERROR,
    EXPIRING,
    RUNNABLE,
    TERMINAL,
    job_errors,
    job_results,
    job_steps,
    jobs,
    queue_pauses,
    rate_starts,
    schedule_fires,
    schedules,
)
from ket.store.types import EXPIRED, RETRY_STATES, ErrorRecord, JobQuery, JobRecord

# what an operator's retry takes (literal SQL, as schema.py's predicates)
_RETRYABLE = jobs.c.state.in_([literal_column(f"'{s}'") for s in RETRY_STATES])

_CLAIMED = (  # the order statement.claimed_job reads
    jobs.c.id,
    jobs.c.name,
    jobs.c.queue,
    jobs.c.payload,
    jobs.c.payload_version,
    jobs.c.priority,
    jobs.c.attempt,
    jobs.c.max_attempts,
    jobs.c.unique_key,
    jobs.c.company,
    jobs.c.run_at,
    jobs.c.enqueued_at,
    jobs.c.lease_until,
    jobs.c.fence,
    jobs.c.tick,
    jobs.c.ticks_skipped,
    jobs.c.trace_context,
)


@dataclass(frozen=True)
class Statements:
    """Every fixed statement of the SQL store in one dialect."""

    claim: Any  # PostgreSQL: one call of ket_claim, which also discards the expired jobs
    expire: Any  # a queue's expired jobs discarded (SQLite's claim, and a limited claim)
    expired_errors: Any  # their records (EXPIRED), from `expire`'s rows
    # a claim within fleet-wide limits (limit.py). PostgreSQL: one call of the function
    # ket_limited_claim (migration 11), which does it all. SQLite, in a transaction (its write
    # lock runs a queue's claims one at a time): the running attempts by job and concurrency
    # key and the starts within the longest rate period (`limit_counts`, which stats read on
    # both), the due jobs whose keys are not full, in claim order, those admitted to executing,
    # their starts recorded, and those past every period forgotten
    limited_claim: Any
    limit_counts: Any
    limit_running: Any  # SQLite: the running attempts by concurrency key
    limit_starts: Any  # SQLite: the starts since `p_since` of the rate scopes `scopes`
    limit_waiting: Any
    limit_candidates: Any
    limit_claim: Any
    rate_record: Any
    rate_forget: Any
    complete_many: Any
    settle: dict[str, Any]
    append_errors: Any
    store_result: Any  # a completion's result: parameters `p_job_id` and `p_result` (JSON text)
    set_progress: Any  # a held lease's report: parameters `p_job_id` and `p_progress` (JSON text)
    steps_of: Any  # a job's recorded steps: parameter `p_job_id`
    step_record: Any  # a step, if `p_fence` holds the executing job: a row when written
    heartbeat: Any
    rescue: Any
    grace: Any
    lock_job: Any
    # an operator's cancel and retry, of one job or a batch (bulk.py): parameter `ids`
    cancel_now: Any
    request_cancel: Any
    make_available: Any
    active_holders: Any  # parameter `keys`
    prunable: Any
    prune_errors: Any  # parameter `ids`
    prune_results: Any  # parameter `ids`
    prune_steps: Any  # parameter `ids`
    prune_jobs: Any  # parameter `ids`
    schedule_states: Any  # parameter `schedule_ids`
    schedule_install: Any
    schedule_move: Any
    schedule_pause: Any  # an operator's pause or resume; a row when it changed
    record_fire: Any
    schedule_fires: Any  # the ledger of one schedule, newest first
    counts: Any
    expired: Any  # per queue: the discarded jobs kept that expired unstarted
    discarded_recent: Any  # per queue: the jobs discarded since `p_since`
    oldest: Any
    queue_ages: Any  # per queue: its oldest lease start and its oldest due run_at
    clock: Any  # the database's now (or the test clock's, passed as `now`)
    notify: Any  # None where the database has no NOTIFY (SQLite)
    next_due: Any  # the database's now and the earliest run_at of a queue's runnable jobs
    lease_end: Any  # the database's now and the earliest lease end of the executing jobs
    look: Any  # PostgreSQL: the safety visit's question, lease_end's and each queue's next_due


@cache
def statements(dialect: str) -> Statements:
    """The cached statements of `dialect`."""
    time = TimeSql(dialect)
    now = time.now()
    fenced = (jobs.c.id == bindparam("p_id"), jobs.c.fence == bindparam("p_fence"))
    held = _held(dialect)
    due = and_(RUNNABLE, jobs.c.run_at <= now)
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return Statements(
        claim=_pg_claim() if dialect == "postgresql" else _claim(time),
        expire=_expire(time),
        expired_errors=insert(job_errors).values(
            job_id=bindparam("p_job_id"), attempt=bindparam("p_attempt"), at=now, error=EXPIRED
        ),
        limited_claim=_limited_claim() if dialect == "postgresql" else None,
        # one row per running attempt's concurrency key (`at` NULL, `n` their number), then
        # one per start under a rate since `p_since` (its scope, `at`, `n`)
        limit_counts=union_all(
            _running(),
            select(rate_starts.c.scope, rate_starts.c.at, rate_starts.c.n).where(
                rate_starts.c.queue == bindparam("p_queue"),
                rate_starts.c.at > bindparam("p_since", type_=rate_starts.c.at.type),
            ),
        ),
        limit_running=_running(),
        limit_starts=select(rate_starts.c.scope, rate_starts.c.at, rate_starts.c.n).where(
            rate_starts.c.queue == bindparam("p_queue"),
            rate_starts.c.at > bindparam("p_since", type_=rate_starts.c.at.type),
            among(dialect, rate_starts.c.scope, "scopes", Text),
        ),
        limit_candidates=_candidates(time, dialect),
        # the due jobs a queue's limits hold back (stats): all of them when the queue is full
        limit_waiting=select(func.count()).where(
            *_claimable(time),
            or_(
                bindparam("p_queue_full", type_=Boolean),
                among(dialect, jobs.c.concurrency_key, "full_concurrency", Text),
                among(dialect, jobs.c.rate_key, "full_rate", Text),
            ),
        ),
        limit_claim=_claimed_by_id(time, dialect),
        # SQLite: a claim's starts of one scope, at the beginning of their tenth of the period
        rate_record=insert(rate_starts).values(
            queue=bindparam("p_queue"),
            scope=bindparam("p_scope"),
            at=bindparam("p_at", type_=rate_starts.c.at.type),
            n=bindparam("p_n"),
        ),
        rate_forget=delete(rate_starts).where(
            rate_starts.c.queue == bindparam("p_queue"),
            rate_starts.c.at <= bindparam("p_since", type_=rate_starts.c.at.type),
        ),
        complete_many=update(jobs)
        .where(held)
        .values(state="completed", finished_at=now, lease_until=None, cancel_requested=False)
        .returning(jobs.c.id, jobs.c.queue),
        settle={
            outcome: update(jobs)
            .where(*fenced, EXECUTING)
            .values(_settle_values(outcome, time))
            .returning(jobs.c.id, jobs.c.attempt, jobs.c.queue)
            for outcome in ("completed", "retryable", "discarded", "snoozed", "cancelled")
        },
        # the attempt's start and worker from its job's row, which the settlement or rescue
        # in the same transaction left as they were
        append_errors=insert(job_errors).from_select(
            ["job_id", "attempt", "at", "error", "traceback", "started_at", "worker_id"],
            select(
                jobs.c.id,
                bindparam("p_attempt", type_=Integer),
                now,
                bindparam("p_error", type_=Text),
                bindparam("p_traceback", type_=Text),
                jobs.c.attempted_at,
                jobs.c.worker_id,
            ).where(jobs.c.id == bindparam("p_job_id")),
        ),
        store_result=insert(job_results).values(
            job_id=bindparam("p_job_id", type_=BigInteger),
            result=_json_text(dialect, bindparam("p_result", type_=Text)),
        ),
        steps_of=select(job_steps.c.name, job_steps.c.value)
        .where(job_steps.c.job_id == bindparam("p_job_id", type_=BigInteger))
        .order_by(job_steps.c.at, job_steps.c.name),
        step_record=dialect_insert(job_steps)
        .from_select(
            ["job_id", "name", "value", "at"],
            select(
                jobs.c.id,
                bindparam("p_name", type_=Text),
                _json_text(dialect, bindparam("p_value", type_=Text)),
                now,
            ).where(
                jobs.c.id == bindparam("p_job_id", type_=BigInteger),
                jobs.c.fence == bindparam("p_fence", type_=BigInteger),
                EXECUTING,
            ),
        )
        .on_conflict_do_nothing()
        .returning(job_steps.c.job_id),
        set_progress=update(jobs)
        .where(jobs.c.id == bindparam("p_job_id", type_=BigInteger))
        .values(progress=_json_text(dialect, bindparam("p_progress", type_=Text))),
        heartbeat=update(jobs)
        .where(held)
        .values(lease_until=time.at("lease"))
        .returning(jobs.c.id, jobs.c.cancel_requested),
        rescue=_rescue(time),
        grace=update(jobs)
        .where(EXECUTING, jobs.c.lease_until < time.at("lease"))
        .values(lease_until=time.at("lease"))
        .returning(jobs.c.id),
        lock_job=select(jobs).where(jobs.c.id == bindparam("p_id")).with_for_update(),
        cancel_now=update(jobs)
        .where(among(dialect, jobs.c.id, "ids", BigInteger), RUNNABLE)
        .values(state="cancelled", finished_at=now),
        request_cancel=update(jobs)
        .where(among(dialect, jobs.c.id, "ids", BigInteger), EXECUTING)
        .values(cancel_requested=True),
        make_available=update(jobs)
        .where(among(dialect, jobs.c.id, "ids", BigInteger), _RETRYABLE)
        .values(
            state="available",
            run_at=now,
            finished_at=None,
            # a job that used all its attempts gets one more
            max_attempts=case(
                (jobs.c.attempt >= jobs.c.max_attempts, jobs.c.attempt + 1),
                else_=jobs.c.max_attempts,
            ),
            cancel_requested=False,
            expires_at=None,  # the operator asked for it: it runs whatever its expiry
        ),
        active_holders=select(jobs.c.id, jobs.c.name, jobs.c.unique_key).where(
            among(dialect, jobs.c.unique_key, "keys", Text), ACTIVE
        ),
        prunable=select(jobs.c.id)
        .where(
            TERMINAL,
            among(dialect, jobs.c.state, "states", Text),
            jobs.c.finished_at <= time.at("retention"),
        )
        .order_by(jobs.c.finished_at, jobs.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True),
        prune_errors=delete(job_errors).where(
            among(dialect, job_errors.c.job_id, "ids", BigInteger)
        ),
        prune_results=delete(job_results).where(
            among(dialect, job_results.c.job_id, "ids", BigInteger)
        ),
        prune_steps=delete(job_steps).where(among(dialect, job_steps.c.job_id, "ids", BigInteger)),
        prune_jobs=delete(jobs).where(among(dialect, jobs.c.id, "ids", BigInteger)),
        schedule_states=select(schedules).where(
            among(dialect, schedules.c.schedule_id, "schedule_ids", Text)
        ),
        schedule_install=dialect_insert(schedules)
        .values(
            schedule_id=bindparam("p_schedule_id"),
            fingerprint=bindparam("p_fingerprint"),
            last_tick=bindparam("p_tick", type_=schedules.c.last_tick.type),
            updated_at=now,
        )
        .on_conflict_do_nothing(index_elements=[schedules.c.schedule_id])
        .returning(schedules.c.schedule_id),
        schedule_move=update(schedules)
        .where(
            schedules.c.schedule_id == bindparam("p_schedule_id"),
            schedules.c.fingerprint == bindparam("p_expected_fingerprint"),
            schedules.c.last_tick == bindparam("p_expected_tick", type_=schedules.c.last_tick.type),
        )
        .values(
            fingerprint=bindparam("p_fingerprint"),
            last_tick=bindparam("p_tick", type_=schedules.c.last_tick.type),
            updated_at=now,
        )
        .returning(schedules.c.schedule_id),  # a row when it moved (the lane has no rowcount)
        schedule_pause=dialect_insert(schedules)
        .values(
            schedule_id=bindparam("p_schedule_id"),
            fingerprint="",  # not installed yet: the first sweep installs it, still paused
            last_tick=now,
            updated_at=now,
            paused=bindparam("p_paused"),
        )
        .on_conflict_do_update(
            index_elements=[schedules.c.schedule_id],
            set_={"paused": bindparam("p_paused"), "updated_at": now},
            where=schedules.c.paused != bindparam("p_paused"),
        )
        .returning(schedules.c.schedule_id),
        schedule_fires=select(schedule_fires)
        .where(schedule_fires.c.schedule_id == bindparam("p_schedule_id"))
        .order_by(schedule_fires.c.tick.desc(), schedule_fires.c.id.desc())
        .limit(bindparam("limit")),
        record_fire=insert(schedule_fires).values(
            schedule_id=bindparam("p_schedule_id"),
            fingerprint=bindparam("p_fingerprint"),
            tick=bindparam("p_tick", type_=schedule_fires.c.tick.type),
            skipped=bindparam("p_skipped"),
            job_id=bindparam("p_job_id"),
            fired_at=now,
        ),
        counts=select(jobs.c.state, jobs.c.queue, func.count()).group_by(
            jobs.c.state, jobs.c.queue
        ),
        expired=select(jobs.c.queue, func.count())
        .select_from(job_errors.join(jobs, jobs.c.id == job_errors.c.job_id))
        .where(EXPIRED_ERROR)
        .group_by(jobs.c.queue),
        discarded_recent=select(jobs.c.queue, func.count())
        .where(
            jobs.c.state == literal_column("'discarded'"),
            jobs.c.finished_at > bindparam("p_since", type_=jobs.c.finished_at.type),
        )
        .group_by(jobs.c.queue),
        oldest=select(
            now.label("now"),
            select(func.min(jobs.c.attempted_at)).where(EXECUTING).scalar_subquery().label("lease"),
            select(func.min(jobs.c.run_at))
            .where(RUNNABLE, jobs.c.run_at <= now)
            .scalar_subquery()
            .label("due"),
        ),
        queue_ages=select(
            jobs.c.queue,
            func.min(case((EXECUTING, jobs.c.attempted_at))).label("lease"),
            func.min(case((due, jobs.c.run_at))).label("due"),
        )
        .where(or_(EXECUTING, due))
        .group_by(jobs.c.queue),
        clock=select(now.label("now")),
        notify=_notify() if dialect == "postgresql" else None,
        # a paused queue has nothing due: its loop waits for the resume's wake-up
        next_due=select(
            now.label("now"),
            select(func.min(jobs.c.run_at))
            .where(jobs.c.queue == bindparam("p_queue"), RUNNABLE, ~_paused(bindparam("p_queue")))
            .scalar_subquery()
            .label("due"),
        ),
        lease_end=select(
            now.label("now"),
            select(func.min(jobs.c.lease_until)).where(EXECUTING).scalar_subquery().label("ends"),
        ),
        look=_look(time) if dialect == "postgresql" else None,
    )


def _json_text(dialect: str, text: Any) -> Any:
    """JSON text bound as such: read as JSONB on PostgreSQL, kept as it is on SQLite."""
    return text.cast(postgresql.JSONB) if dialect == "postgresql" else text


def among(dialect: str, column: Any, name: str, kind: Any) -> Any:
    """`column` is one of the list parameter `name`: `= ANY(array)` on PostgreSQL (one text,
    prepared once, whatever the list's length), an expanding IN on SQLite."""
    if dialect == "postgresql":
        return column == any_(bindparam(name, type_=postgresql.ARRAY(kind)))
    return column.in_(bindparam(name, expanding=True))


def _held(dialect: str) -> Any:
    """Executing rows whose (id, fence) is among the given pairs.

    On PostgreSQL the pairs are two arrays, so that the statement text stays the same (and
    prepared) whatever their number, and the rows are found by primary key (`id = ANY(ids)`),
    never through the executing rows: the partial index on those is out of reach, because the
    state is compared with a parameter. Statistics taken while the jobs were still queued say
    that almost nothing executes, and a plan that trusted them scanned every executing row for
    each settlement (30 ms for 500 pairs among 15,000 executing rows, quadratic in a drain).
    """
    if dialect != "postgresql":
        return and_(
            tuple_(jobs.c.id, jobs.c.fence).in_(bindparam("pairs", expanding=True)), EXECUTING
        )
    ids = bindparam("ids", type_=postgresql.ARRAY(BigInteger))
    pairs = (
        func.unnest(ids, bindparam("fences", type_=postgresql.ARRAY(BigInteger)))
        .table_valued("id", "fence")
        .render_derived(name="pairs")
    )
    return and_(
        jobs.c.id == any_(ids),
        jobs.c.id == pairs.c.id,
        jobs.c.fence == pairs.c.fence,
        jobs.c.state == bindparam("executing_state", "executing"),
    )


def _notify() -> Any:
    """NOTIFY each queue in `queues` once; PostgreSQL delivers it when the transaction commits."""
    queues = bindparam("queues", type_=postgresql.ARRAY(Text))
    woken = func.unnest(queues).table_valued("queue").render_derived(name="woken")
    return select(func.pg_notify(CHANNEL, woken.c.queue)).select_from(woken)


def _paused(queue: Any) -> Any:
    """Whether `queue` (a parameter or a column) is paused: a row in ket_queue_pauses."""
    return select(queue_pauses.c.queue).where(queue_pauses.c.queue == queue).exists()


def _look(time: TimeSql) -> Any:
    """The safety visit's one statement: a row per queue of `p_queues` with `at`, when its next
    runnable job is due (now if one is due already: that question stops at a backlog's first
    due row, where the min() would read them all), or NULL when it has none; then a row with
    no queue whose `at` is the earliest lease end of the executing jobs (NULL: none runs)."""
    now = time.now()
    queues = bindparam("p_queues", type_=postgresql.ARRAY(Text))
    looked = func.unnest(queues).table_valued("queue").render_derived(name="looked")
    of_queue = and_(jobs.c.queue == looked.c.queue, RUNNABLE)
    # in the claim's order, as the claim reads it: the index's first due row, not a scan
    first_due = (
        select(jobs.c.id)
        .where(of_queue, jobs.c.run_at <= now)
        .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
        .limit(1)
        .scalar_subquery()
    )
    next_due = select(func.min(jobs.c.run_at)).where(of_queue).scalar_subquery()
    # a paused queue has nothing due (the visit does not wake it to claim in vain)
    at = case((_paused(looked.c.queue), null()), (first_due.is_not(None), now), else_=next_due)
    per_queue = select(looked.c.queue, now.label("now"), at.label("at")).select_from(looked)
    lease = select(
        null().label("queue"),
        now.label("now"),
        select(func.min(jobs.c.lease_until)).where(EXECUTING).scalar_subquery().label("at"),
    )
    return union_all(per_queue, lease)


def _limited_claim() -> Any:
    """PostgreSQL: a claim of `p_queue` within its limits, one call of ket_limited_claim: the
    claimed rows (the plain claim's columns), then a row with no job, each with `contended`
    and `retry_at` (admission.Admitted). The limits travel as arrays, a job name's entry at
    the same index in each (NULL: no such limit), and the queue's own as scalars."""

    def array(name: str, of: Any) -> Any:
        return bindparam(name, type_=postgresql.ARRAY(of))

    called = func.ket_limited_claim(
        *_claim_arguments(),
        array("p_names", Text),
        array("p_concurrency", BigInteger),
        array("p_rate", BigInteger),
        array("p_period", Float),
        bindparam("p_queue_concurrency", type_=BigInteger),
        bindparam("p_queue_rate", type_=BigInteger),
        bindparam("p_queue_period", type_=Float),
    ).table_valued(
        *(column(c.name, c.type) for c in _CLAIMED),
        column("contended", Boolean),
        column("retry_at", Instant),
    )
    return select(*called.c)


def _claimable(time: TimeSql) -> list[Any]:
    """The claim's conditions: a runnable job of `p_queue`, due, its queue not paused, not
    past its expiry."""
    now = time.now()
    return [
        jobs.c.queue == bindparam("p_queue"),
        RUNNABLE,
        jobs.c.run_at <= now,
        ~_paused(bindparam("p_queue")),  # a paused queue's jobs wait (ket queues pause)
        or_(jobs.c.expires_at.is_(None), jobs.c.expires_at > now),
    ]


def _running() -> Any:
    """A queue's running attempts by concurrency key: the key, `at` NULL, `n` their number."""
    return (
        select(
            jobs.c.concurrency_key.label("key"),
            type_coerce(null(), Instant).label("at"),  # a union's `at` reads as instants
            func.count().label("n"),
        )
        .where(jobs.c.queue == bindparam("p_queue"), EXECUTING)
        .group_by(jobs.c.concurrency_key)
    )


def _candidates(time: TimeSql, dialect: str) -> Any:
    """The first `limit` claimable jobs of a queue whose keys are not full (`full_concurrency`,
    `full_rate`: the keys at their limit), in claim order, with their keys: a job held back by
    its key is passed over in the statement, never read, so other keys flow."""
    return (
        select(jobs.c.id, jobs.c.name, jobs.c.concurrency_key, jobs.c.rate_key)
        .where(
            *_claimable(time),
            or_(
                jobs.c.concurrency_key.is_(None),
                ~among(dialect, jobs.c.concurrency_key, "full_concurrency", Text),
            ),
            or_(jobs.c.rate_key.is_(None), ~among(dialect, jobs.c.rate_key, "full_rate", Text)),
        )
        .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
    )


def _claimed_by_id(time: TimeSql, dialect: str) -> Any:
    """SQLite: the admitted candidates (`ids`) to executing, as the claim does."""
    return (
        update(jobs)
        .where(among(dialect, jobs.c.id, "ids", BigInteger))
        .values(_claim_values(time))
        .returning(*_CLAIMED)
    )


def _claim_values(time: TimeSql) -> dict[str, Any]:
    return {
        "state": "executing",
        "attempt": jobs.c.attempt + 1,
        "worker_id": bindparam("p_worker_id"),
        "attempted_at": time.now(),
        "lease_until": time.at("lease"),
        "fence": jobs.c.fence + 1,
        "cancel_requested": False,
    }


def _claim(time: TimeSql) -> Any:
    """SQLite: UPDATE the first due runnable rows of a queue to executing. A job past its
    expiry is never claimed (SQLite runs `expire` before the claim, in its transaction)."""
    claimable = (
        select(jobs.c.id)
        .where(*_claimable(time))
        .order_by(jobs.c.priority, jobs.c.run_at, jobs.c.id)
        .limit(bindparam("limit"))
        .cte("claimable")
    )
    return (
        update(jobs)
        .where(jobs.c.id == claimable.c.id)
        .values(_claim_values(time))
        .returning(*_CLAIMED)
    )


def _claim_arguments() -> tuple[Any, ...]:
    """The arguments both claim functions take first: the queue, how many, the worker, the
    clock (NULL: the database's) and the lease."""
    return (
        bindparam("p_queue", type_=Text),
        bindparam("limit", type_=Integer),
        bindparam("p_worker_id", type_=Text),
        bindparam("now", type_=Instant),
        bindparam("lease_s", type_=Float),
        bindparam("lease_at", type_=Instant),
    )


def _pg_claim() -> Any:
    """PostgreSQL: the claim as one call of the function ket_claim (migration 14), whose plans
    are made once a connection: it discards up to `limit` of the queue's expired jobs and
    records why, then claims the first due runnable rows (SKIP LOCKED); the claimed rows."""
    called = func.ket_claim(*_claim_arguments()).table_valued(
        *(column(c.name, c.type) for c in _CLAIMED)
    )
    return select(*called.c)


def _expire(time: TimeSql) -> Any:
    """Discard up to `limit` of a queue's runnable jobs whose expiry has passed (their index
    holds only jobs that can expire: nothing to read for the others); their ids and attempts."""
    now = time.now()
    expiring = (
        select(jobs.c.id)
        .where(jobs.c.queue == bindparam("p_queue"), EXPIRING, jobs.c.expires_at <= now)
        .order_by(jobs.c.expires_at, jobs.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("expiring")
    )
    return (
        update(jobs)
        .where(jobs.c.id == expiring.c.id)
        .values(state="discarded", finished_at=now, lease_until=None, cancel_requested=False)
        .returning(jobs.c.id, jobs.c.attempt)
    )


def _settle_values(outcome: str, time: TimeSql) -> dict[str, Any]:
    values: dict[str, Any] = {"lease_until": None, "cancel_requested": False}
    if outcome in ("completed", "discarded", "cancelled"):
        values.update(state=outcome, finished_at=time.now())
    elif outcome == "retryable":
        values.update(state="retryable", run_at=time.at("delay"))
    else:  # snoozed: the attempt is given back
        values.update(
            state=case((bindparam("delay_s") == 0, "available"), else_="scheduled"),
            run_at=time.at("delay"),
            attempt=jobs.c.attempt - 1,
        )
    return values


def _rescue(time: TimeSql) -> Any:
    """Expired leases -> cancelled (cancel requested), discarded (last attempt) or retryable."""
    now = time.now()
    expired = (
        select(jobs.c.id)
        .where(EXECUTING, jobs.c.lease_until < now)
        .order_by(jobs.c.lease_until, jobs.c.id)
        .limit(bindparam("limit"))
        .with_for_update(skip_locked=True)
        .cte("expired")
    )
    final = jobs.c.cancel_requested | (jobs.c.attempt >= jobs.c.max_attempts)
    return (
        update(jobs)
        .where(jobs.c.id == expired.c.id)
        .values(
            state=case(
                (jobs.c.cancel_requested, "cancelled"),
                (jobs.c.attempt >= jobs.c.max_attempts, "discarded"),
                else_="retryable",
            ),
            run_at=case((final, jobs.c.run_at), else_=now),
            finished_at=case((final, now), else_=None),
            lease_until=None,
            cancel_requested=False,
        )
        .returning(
            jobs.c.id, jobs.c.name, jobs.c.queue, jobs.c.state, jobs.c.attempt, jobs.c.worker_id
        )
    )


def listing(dialect: str, job_query: JobQuery) -> Any:
    """The (dynamic) listing query: filters, newest first, one page."""
    q = job_query
    statement = select(jobs)
    if q.states:
        statement = statement.where(jobs.c.state.in_(list(q.states)))
    statement = statement.where(*selected(dialect, q.queues, q.names, q.tags))
    if q.unique_key is not None:
        statement = statement.where(jobs.c.unique_key == q.unique_key)
    return statement.order_by(jobs.c.id.desc()).limit(q.limit).offset(q.offset)


def selected(
    dialect: str, queues: Sequence[str], names: Sequence[str], tags: Sequence[str]
) -> list[Any]:
    """Clauses for a listing's or a bulk filter's queues, names and tags: each one given takes
    the jobs with any one of its values (bound in the statement, as the dynamic filters are)."""
    clauses = []
    if queues:
        clauses.append(jobs.c.queue.in_(list(queues)))
    if names:
        clauses.append(jobs.c.name.in_(list(names)))
    if tags:
        clauses.append(tagged(dialect, tags))
    return clauses


def tagged(dialect: str, tags: Sequence[str]) -> Any:
    """A clause for "the job carries any one of `tags`": on PostgreSQL one `@>` per tag, OR-ed,
    each of which the GIN index answers (its jsonb_path_ops class has no `?|`); on SQLite one
    json_each probe."""
    from sqlalchemy import column, exists, literal

    from ket.store.validate import encode_tags

    if dialect == "postgresql":
        return or_(
            *(
                jobs.c.tags.op("@>")(literal(encode_tags([tag]), Text).cast(postgresql.JSONB))
                for tag in tags
            )
        )
    element = func.json_each(jobs.c.tags).table_valued("value")
    return exists().select_from(element).where(column("value").in_(list(tags)))


def results_of(ids: Sequence[int]) -> Any:
    """(job id, result) of the jobs `ids` that have one."""
    return select(job_results.c.job_id, job_results.c.result).where(job_results.c.job_id.in_(ids))


def errors_of(ids: Sequence[int]) -> Any:
    return (
        select(job_errors)
        .where(job_errors.c.job_id.in_(ids))
        .order_by(job_errors.c.job_id, job_errors.c.id)
    )


def job_records(rows: Sequence[Any], history: Sequence[Any]) -> list[JobRecord]:
    errors: dict[int, list[ErrorRecord]] = defaultdict(list)
    for entry in history:
        errors[entry.job_id].append(
            ErrorRecord(
                attempt=entry.attempt,
                at=entry.at,
                error=entry.error,
                traceback=entry.traceback,
                started_at=entry.started_at,
                worker_id=entry.worker_id,
            )
        )
    return [
        JobRecord(
            id=row.id,
            name=row.name,
            queue=row.queue,
            state=row.state,
            payload=row.payload,
            payload_version=row.payload_version,
            priority=row.priority,
            attempt=row.attempt,
            max_attempts=row.max_attempts,
            unique_key=row.unique_key,
            company=row.company,
            run_at=row.run_at,
            enqueued_at=row.enqueued_at,
            attempted_at=row.attempted_at,
            finished_at=row.finished_at,
            worker_id=row.worker_id,
            lease_until=row.lease_until,
            fence=row.fence,
            cancel_requested=bool(row.cancel_requested),
            errors=tuple(errors.get(row.id, ())),
            tick=row.tick,
            ticks_skipped=row.ticks_skipped,
            tags=tuple(row.tags or ()),
            trace_context=row.trace_context,
            rerun_of=row.rerun_of,
            expires_at=row.expires_at,
            window_key=row.window_key,
            progress=row.progress,
        )
        for row in rows
    ]
