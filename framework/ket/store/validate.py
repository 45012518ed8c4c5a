"""What every store refuses before touching its data: bad jobs and bad call params.

Shared by all stores so they refuse the same things with the same words (JobRejected, naming the
value), and so no bad value reaches a database that would fail on it in its own way: a number
past its column (PostgreSQL's "bigint out of range", Python's OverflowError on SQLite), a
duration past the calendar, a NUL character (PostgreSQL text cannot hold one) or a lone
surrogate (no UTF-8 for it). The conformance kit's `errors` area holds every store to this.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeGuard, cast

from ket.errors import JobRejected
from ket.limits import (
    MAX_KEY_LENGTH,
    MAX_NAME_LENGTH,
    MAX_PAYLOAD_BYTES,
    MAX_PROGRESS_BYTES,
    MAX_RESULT_BYTES,
    MAX_STEP_BYTES,
    MAX_TAG_LENGTH,
    MAX_TAGS,
)
from ket.store.types import (
    AUDIT_ACTIONS,
    CANCEL_STATES,
    JOB_STATES,
    MAX_AUDIT_TEXT,
    PRIORITY_MAX,
    PRIORITY_MIN,
    RETRY_STATES,
    TERMINAL_STATES,
    AuditEntry,
    AuditQuery,
    BulkBatch,
    Heartbeat,
    JobClaim,
    JobFilter,
    JobId,
    JobQuery,
    JobState,
    NewJob,
    Prune,
    Rerun,
    Settle,
    StepRecord,
    TickClaim,
    Vacuum,
)

MAX_TRACE_ENTRIES, MAX_TRACE_TEXT = 8, 512
MAX_FILTER_VALUES = 1_000  # the states, queues or names one listing or bulk filter may give
# A century: any longer lease, delay, retention or staleness means "never", and would overflow
# date arithmetic (Python's datetime ends in the year 9999).
MAX_SECONDS = 3_153_600_000
# The columns: ids, fences and limits are 64-bit (BIGINT), counters 32-bit (INTEGER).
MAX_BIGINT = 2**63 - 1
MAX_INTEGER = 2**31 - 1
# what "text" means in the messages below: what every database can store as a string
_TEXT = " of UTF-8 text without NUL"
_ACTION_STATES = {"retry": RETRY_STATES, "cancel": CANCEL_STATES}
OUTCOMES = ("completed", "retryable", "discarded", "snoozed", "cancelled")
# payloads as compact JSON; one encoder for all (json.dumps with options builds one per call)
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_payloads(jobs: Sequence[NewJob], *, limit: int = MAX_PAYLOAD_BYTES) -> list[str]:
    """Check every job, return each payload as compact JSON; JobRejected names the first bad."""
    encoded: list[str] = []
    checked: NewJob | None = None
    for job in jobs:
        if job is checked:  # the very same value again (a job without input or options)
            encoded.append(encoded[-1])
            continue
        # the jobs of a batch mostly share their declaration's values (the very same objects):
        # those need checking once, only each job's own values every time
        if checked is None or not _shares_declared(job, checked):
            _check_declared(job)
        checked = job
        _check_own(job)
        encoded.append(encode_payload(job, limit=limit))
    return encoded


def check_new_job(job: NewJob) -> None:
    """Refuse a job whose fields are out of range, naming the job and the value."""
    _check_declared(job)
    _check_own(job)


def _shares_declared(job: NewJob, other: NewJob) -> bool:
    """Whether `job` holds the very objects `other` does where _check_declared looks (the same
    object passes or fails the same checks, whatever its type)."""
    return (
        job.name is other.name
        and job.queue is other.queue
        and job.company is other.company
        and job.priority is other.priority
        and job.max_attempts is other.max_attempts
        and job.payload_version is other.payload_version
        and job.ticks_skipped is other.ticks_skipped
        and job.tags is other.tags
    )


def _check_declared(job: NewJob) -> None:
    """The fields a job mostly takes from its declaration."""
    if not _clean_text(job.name, MAX_NAME_LENGTH):
        raise JobRejected(
            f"job name must be 1 to {MAX_NAME_LENGTH} characters{_TEXT}, got {job.name!r}"
        )
    _text(job, "queue", job.queue, required=True)
    _text(job, "company", job.company, required=False)
    if not _int(job.priority) or not PRIORITY_MIN <= job.priority <= PRIORITY_MAX:
        raise JobRejected(
            f"job {job.name!r}: priority must be an integer from {PRIORITY_MIN} to "
            f"{PRIORITY_MAX}, got {job.priority!r}"
        )
    _counter(job, "max_attempts", job.max_attempts, minimum=1)
    _counter(job, "payload_version", job.payload_version, minimum=1)
    if job.ticks_skipped is not None:
        _counter(job, "ticks_skipped", job.ticks_skipped, minimum=0)
    if job.tags:
        check_tags(job.tags, f"job {job.name!r}: tags")


def _check_own(job: NewJob) -> None:
    """The fields each job has of its own."""
    _text(job, "unique_key", job.unique_key, required=False)
    if job.trace_context is not None:
        _check_trace_context(job)
    for field, value in (("run_at", job.run_at), ("tick", job.tick)):
        if value is not None and not _aware(value):
            raise JobRejected(
                f"job {job.name!r}: {field} must be a timezone-aware datetime, got {value!r}"
            )
    if job.expires_in_seconds is not None:
        check_seconds(f"job {job.name!r}: expires_in", job.expires_in_seconds, positive=True)
    if job.delay_seconds:  # 0.0 for almost every job: nothing to check
        check_seconds(f"job {job.name!r}: delay_seconds", job.delay_seconds, positive=False)
        if job.run_at is not None:
            raise JobRejected(
                f"job {job.name!r}: give run_at or delay_seconds, not both (run_at "
                f"{job.run_at.isoformat()}, delay_seconds {job.delay_seconds!r})"
            )


def encode_payload(job: NewJob, *, limit: int = MAX_PAYLOAD_BYTES) -> str:
    """The payload as compact JSON, refused if it is not a JSON object or exceeds `limit` bytes."""
    if not isinstance(job.payload, dict):
        raise JobRejected(f"job {job.name!r}: payload must be a JSON object, got {job.payload!r}")
    if not job.payload and limit >= 2:  # a job without input: nothing to encode or measure
        return "{}"
    try:
        text = _JSON.encode(job.payload)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError) as error:  # UnicodeEncodeError (a lone surrogate) included
        raise JobRejected(f"job {job.name!r}: payload is not JSON-serialisable: {error}") from None
    # json.dumps writes NUL as the escape \u0000, which PostgreSQL's JSONB refuses; the substring
    # test is cheap, and only a hit pays for the exact walk (the text could be an escaped "\\u0000")
    if "\\u0000" in text and _holds_nul(job.payload):
        raise JobRejected(f"job {job.name!r}: payload strings must not contain NUL characters")
    if size > limit:
        raise JobRejected(
            f"job {job.name!r}: payload is {size} bytes, over the limit of {limit} bytes; "
            "store large data in a model or in storage and enqueue a reference"
        )
    return text


def check_tags(tags: object, what: str) -> None:
    """Refuse tags that are not a tuple or list of at most MAX_TAGS strings of 1 to
    MAX_TAG_LENGTH characters; `what` names them in the message (`job 'send': tags`)."""
    if not isinstance(tags, tuple | list):
        raise JobRejected(f"{what} must be a list of strings, got {tags!r}")
    if len(tags) > MAX_TAGS:
        raise JobRejected(f"{what} hold at most {MAX_TAGS} tags, got {len(tags)}")
    for tag in tags:
        if not _clean_text(tag, MAX_TAG_LENGTH):
            raise JobRejected(
                f"{what}: a tag must be 1 to {MAX_TAG_LENGTH} characters{_TEXT}, got {tag!r}"
            )


def _check_trace_context(job: NewJob) -> None:
    """A trace context is a few short strings by name (W3C `traceparent`, `tracestate`)."""
    carrier = job.trace_context
    if (
        not isinstance(carrier, dict)
        or len(carrier) > MAX_TRACE_ENTRIES
        or not all(
            _clean_text(k, MAX_TRACE_TEXT) and _clean_text(v, MAX_TRACE_TEXT)
            for k, v in carrier.items()
        )
    ):
        raise JobRejected(
            f"job {job.name!r}: trace_context must be a dict of at most {MAX_TRACE_ENTRIES} "
            f"strings of 1 to {MAX_TRACE_TEXT} characters, got {carrier!r}"
        )


def encode_trace_context(carrier: Mapping[str, str] | None) -> str | None:
    """A checked trace context as JSON, None for none."""
    return _JSON.encode(dict(carrier)) if carrier else None


def encode_tags(tags: Sequence[str]) -> str | None:
    """Checked tags as a JSON array, None for none (the column stays NULL, off the index)."""
    return _JSON.encode(list(tags)) if tags else None


def check_claim(claim: JobClaim) -> None:
    """Refuse a claim with a bad limit, lease, queue or worker id."""
    check_count("claim limit", claim.limit, minimum=1)
    check_seconds("lease_seconds", claim.lease_seconds, positive=True)
    for field, value in (("queue", claim.queue), ("worker_id", claim.worker_id)):
        if not _clean_text(value, MAX_KEY_LENGTH):
            raise JobRejected(
                f"a claim's {field} must be 1 to {MAX_KEY_LENGTH} characters{_TEXT}, got {value!r}"
            )


def check_settlements(settlements: Sequence[Settle]) -> None:
    """Refuse bad ids and fences, unknown outcomes, and delays that are not 0 to a century."""
    for settle in settlements:
        check_job_id(settle.id)
        _fence(settle.id, settle.fence)
        if settle.outcome not in OUTCOMES:
            raise JobRejected(f"job {settle.id}: unknown outcome {settle.outcome!r}")
        check_seconds("delay_seconds", settle.delay_seconds, positive=False, job=settle.id)
        if settle.result is not None:
            _result(settle)


def _result(settle: Settle) -> None:
    """A result only with a completion, as the JSON text of an object of MAX_RESULT_BYTES at
    most."""
    if settle.outcome != "completed":
        raise JobRejected(
            f"job {settle.id}: a result comes with a completion, not {settle.outcome!r}"
        )
    _json_object(settle.id, "result", settle.result, MAX_RESULT_BYTES)


def _json_object(job_id: JobId, what: str, text: object, limit: int) -> None:
    """`text` is the JSON text of an object of `limit` bytes at most, or JobRejected says."""
    if not isinstance(_json(job_id, what, text, limit), dict):
        raise JobRejected(f"job {job_id}: {what} is not the JSON text of an object: {text!r:.80}")


def _json(job_id: JobId, what: str, text: object, limit: int) -> object:
    """The value of `text`, JSON text of `limit` bytes at most, or JobRejected says."""
    size = len(text.encode()) if isinstance(text, str) else 0
    if size > limit:
        raise JobRejected(f"job {job_id}: {what} is {size} bytes, over the limit of {limit} bytes")
    try:
        return json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise JobRejected(f"job {job_id}: {what} is not JSON text: {text!r:.80}") from None


def check_step(step: StepRecord) -> None:
    """Refuse a bad id, fence or name, or a value that is not JSON of MAX_STEP_BYTES at most."""
    check_job_id(step.id)
    _fence(step.id, step.fence)
    if not isinstance(step.name, str) or not 1 <= len(step.name) <= MAX_NAME_LENGTH:
        raise JobRejected(
            f"job {step.id}: a step's name is 1 to {MAX_NAME_LENGTH} characters, got "
            f"{step.name!r:.80}"
        )
    _json(step.id, f"step {step.name!r}", step.value, MAX_STEP_BYTES)


def check_heartbeat(heartbeat: Heartbeat) -> None:
    """Refuse a lease that is not a positive number of seconds, and bad ids or fences."""
    check_seconds("lease_seconds", heartbeat.lease_seconds, positive=True)
    for lease in heartbeat.leases:
        check_job_id(lease.id)
        _fence(lease.id, lease.fence)
        if lease.progress is not None:
            _json_object(lease.id, "progress", lease.progress, MAX_PROGRESS_BYTES)


def check_prune(prune: Prune) -> None:
    """Refuse a retention that is not 0 to a century, a bad limit, or states not terminal."""
    check_seconds("prune older_than_seconds", prune.older_than_seconds, positive=False)
    check_count("prune limit", prune.limit, minimum=1)
    bad = [s for s in prune.states if s not in TERMINAL_STATES]
    if bad or not prune.states:
        raise JobRejected(f"prune removes terminal states only, got {prune.states!r}")


def check_vacuum(vacuum: Vacuum) -> None:
    """Refuse a negative threshold or a scale factor that is not a finite number from 0 to 100."""
    check_count("vacuum threshold", vacuum.threshold, minimum=0)
    factor = vacuum.scale_factor
    if (
        isinstance(factor, bool)
        or not isinstance(factor, int | float)
        or not 0 <= factor <= 100  # NaN fails both comparisons
    ):
        raise JobRejected(f"vacuum scale_factor must be a number from 0 to 100, got {factor!r}")


def check_job_id(job_id: object) -> None:
    """Refuse a job id that is not an integer a store can hold (64 bits, signed).

    Any such id may be unknown (the command then says "no such job"); a bigger one cannot even
    be looked up, and a bool or float is a caller's mistake.
    """
    if not _bigint(job_id):
        raise JobRejected(f"a job id must be a 64-bit integer, got {job_id!r}")


def check_count(field: str, value: object, *, minimum: int) -> None:
    """Refuse a limit or offset that is not an integer from `minimum` to 2**63 - 1."""
    if not _int(value) or not minimum <= value <= MAX_BIGINT:
        raise JobRejected(
            f"{field} must be an integer from {minimum} to {MAX_BIGINT}, got {value!r}"
        )


def check_seconds(field: str, value: object, *, positive: bool, job: JobId | None = None) -> None:
    """Refuse a duration that is not a finite number of seconds within a century; the message
    names `field` (of `job`, when given), built only for a refusal: this runs for every
    settlement."""
    if type(value) in (int, float):  # the common case, at once (NaN fails every comparison)
        number = cast(float, value)
        if (number > 0 if positive else number >= 0) and number <= MAX_SECONDS:
            return
    low = "a positive" if positive else "a non-negative"
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
        or value > MAX_SECONDS
    ):
        name = field if job is None else f"job {job}: {field}"
        raise JobRejected(
            f"{name} must be {low} finite number of seconds, at most {MAX_SECONDS} "
            f"(a century), got {value!r}"
        )


def check_timeout(timeout: object) -> None:
    """Refuse a wait timeout that is negative or not a number (infinity waits for ever)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise JobRejected(f"timeout must be a number of seconds, at least 0, got {timeout!r}")


def check_query(query: JobQuery) -> None:
    """Refuse a listing page with a bad limit or offset, or filters no store can compare."""
    check_count("job list limit", query.limit, minimum=0)
    check_count("job list offset", query.offset, minimum=0)
    _check_selection("job list", query.states, JOB_STATES, query.queues, query.names)
    check_tags(query.tags, "job list tags")
    if query.unique_key is not None and not _clean_text(query.unique_key, MAX_KEY_LENGTH):
        raise JobRejected(
            f"a unique key must be 1 to {MAX_KEY_LENGTH} characters{_TEXT}, "
            f"got {query.unique_key!r}"
        )


def check_filter(job_filter: JobFilter) -> tuple[JobState, ...]:
    """Refuse a bulk filter naming an unknown action, a state the action does not apply to, a
    bad queue, name, instant or id; the states it selects (all its action's when none given)."""
    allowed = _ACTION_STATES.get(job_filter.action)
    if allowed is None:
        raise JobRejected(f"bulk action must be retry or cancel, got {job_filter.action!r}")
    states = job_filter.states
    what = f"bulk {job_filter.action}"
    _check_selection(what, states, allowed, job_filter.queues, job_filter.names)
    check_tags(job_filter.tags, "bulk filter tags")
    before = job_filter.enqueued_before
    if before is not None and not _aware(before):
        raise JobRejected(
            f"bulk filter enqueued_before must be a timezone-aware datetime, got {before!r}"
        )
    check_count("bulk filter after_id", job_filter.after_id, minimum=0)
    if job_filter.through_id is not None:
        check_count("bulk filter through_id", job_filter.through_id, minimum=0)
    ids = job_filter.ids
    if not isinstance(ids, tuple | list) or len(ids) > MAX_FILTER_VALUES:
        raise JobRejected(
            f"bulk filter ids must be a tuple of at most {MAX_FILTER_VALUES} job ids, got {ids!r}"
        )
    for job_id in ids:
        check_job_id(job_id)
    return tuple(dict.fromkeys(states)) if states else allowed


def _check_selection(
    what: str,
    states: object,
    allowed: tuple[JobState, ...],
    queues: object,
    names: object,
) -> None:
    """Refuse a listing's or a bulk filter's states, queues or names that are not a tuple or a
    list (a lone string would be matched letter by letter), hold more than MAX_FILTER_VALUES,
    or a value no job can have: a state not in `allowed`, a queue or name that is not text."""
    for field, values in (("states", states), ("queues", queues), ("names", names)):
        if not isinstance(values, tuple | list):
            raise JobRejected(f"{what} {field} must be a tuple of strings, got {values!r}")
        if len(values) > MAX_FILTER_VALUES:
            raise JobRejected(
                f"{what} {field} hold at most {MAX_FILTER_VALUES} values, got {len(values)}"
            )
    for state in cast("Sequence[object]", states):
        if state not in allowed:
            raise JobRejected(
                f"{what} applies to jobs in states {', '.join(allowed)}; got state {state!r}"
            )
    for field, value in (
        *(("queue", v) for v in cast("Sequence[object]", queues)),
        *(("name", v) for v in cast("Sequence[object]", names)),
    ):
        if not _clean_text(value, MAX_KEY_LENGTH):
            raise JobRejected(
                f"{what} {field} must be 1 to {MAX_KEY_LENGTH} characters{_TEXT}, got {value!r}"
            )


def check_bulk_batch(batch: BulkBatch) -> tuple[JobState, ...]:
    """Refuse a bulk batch with a bad filter or a limit below 1; the states it selects."""
    states = check_filter(batch.filter)
    check_count("bulk batch limit", batch.limit, minimum=1)
    return states


def check_queue(queue: object) -> None:
    """Refuse a queue name that is not 1 to MAX_KEY_LENGTH characters without NUL."""
    if not _clean_text(queue, MAX_KEY_LENGTH):
        raise JobRejected(f"a queue must be 1 to {MAX_KEY_LENGTH} characters{_TEXT}, got {queue!r}")


def check_queue_pause(queue: object, paused_by: object) -> None:
    """Refuse a bad queue name (`check_queue`), or an operator's name that is not 1 to
    MAX_AUDIT_TEXT characters without NUL."""
    check_queue(queue)
    if not _clean_text(paused_by, MAX_AUDIT_TEXT):
        raise JobRejected(
            f"who pauses a queue must be 1 to {MAX_AUDIT_TEXT} characters{_TEXT}, got {paused_by!r}"
        )


def check_schedule_ids(schedule_ids: Collection[object]) -> None:
    """Refuse schedule ids that are not 1 to MAX_KEY_LENGTH characters without NUL."""
    for schedule_id in schedule_ids:
        if not _clean_text(schedule_id, MAX_KEY_LENGTH):
            raise JobRejected(
                f"a schedule id must be 1 to {MAX_KEY_LENGTH} characters{_TEXT}, "
                f"got {schedule_id!r}"
            )


def check_tick_claim(claim: TickClaim) -> list[str]:
    """Refuse a malformed tick claim; the encoded payload of its job (none, or one).

    Installing a schedule never fires, so an install that carries a job is refused rather than
    half-applied.
    """
    check_schedule_ids([claim.schedule_id])
    if not _clean_text(claim.fingerprint, MAX_KEY_LENGTH):
        raise JobRejected(
            f"schedule {claim.schedule_id!r}: fingerprint must be 1 to {MAX_KEY_LENGTH} "
            f"characters{_TEXT}, got {claim.fingerprint!r}"
        )
    ticks = [("tick", claim.tick)]
    if claim.expected is not None:
        ticks.append(("expected last_tick", claim.expected.last_tick))
    for field, value in ticks:
        if not _aware(value):
            raise JobRejected(
                f"schedule {claim.schedule_id!r}: {field} must be a timezone-aware datetime, "
                f"got {value!r}"
            )
    if not _int(claim.skipped) or not 0 <= claim.skipped <= MAX_INTEGER:
        raise JobRejected(
            f"schedule {claim.schedule_id!r}: skipped must be an integer from 0 to "
            f"{MAX_INTEGER}, got {claim.skipped!r}"
        )
    if claim.expected is None and claim.job is not None:
        raise JobRejected(
            f"schedule {claim.schedule_id!r}: installing a schedule never fires a job"
        )
    return encode_payloads([claim.job]) if claim.job is not None else []


def check_run_now(schedule_id: str, fingerprint: str, job: NewJob) -> list[str]:
    """Refuse a malformed run-now (its job must carry the tick it is fired for); the job's
    encoded payload."""
    check_schedule_ids([schedule_id])
    if not _clean_text(fingerprint, MAX_KEY_LENGTH):
        raise JobRejected(
            f"schedule {schedule_id!r}: fingerprint must be 1 to {MAX_KEY_LENGTH} "
            f"characters{_TEXT}, got {fingerprint!r}"
        )
    if not _aware(job.tick):
        raise JobRejected(
            f"schedule {schedule_id!r}: the job run now must carry its tick, a timezone-aware "
            f"datetime, got {job.tick!r}"
        )
    return encode_payloads([job])


def check_message_key(key: object) -> None:
    """Refuse an idempotency key that is not a string of 1 to MAX_KEY_LENGTH characters."""
    if not _clean_text(key, MAX_KEY_LENGTH):
        raise JobRejected(
            f"message key must be a string of 1 to {MAX_KEY_LENGTH} characters{_TEXT}, got {key!r}"
        )


def check_message_claim(key: object, stale_after_seconds: object) -> None:
    """Refuse a bad key, or a staleness that is negative or not a finite number of seconds."""
    check_message_key(key)
    check_seconds("stale_after_seconds", stale_after_seconds, positive=False)


# a dashboard session lasts at most this long (the dashboard asks for hours)
MAX_SESSION_SECONDS = 30 * 86_400.0


def check_session_key(key: object) -> None:
    """Refuse a session key that is not a string of 1 to MAX_KEY_LENGTH characters."""
    if not _clean_text(key, MAX_KEY_LENGTH):
        raise JobRejected(
            f"session key must be a string of 1 to {MAX_KEY_LENGTH} characters{_TEXT}, got {key!r}"
        )


def check_session(session: Any, ttl_seconds: object) -> None:
    """Refuse a session with a bad key, subject, company or permission, or a lifetime that is
    not above 0 and at most MAX_SESSION_SECONDS."""
    check_session_key(session.key)
    for field, value in (("subject", session.subject), ("company", session.company)):
        if (value is not None or field == "subject") and not _clean_text(value, MAX_KEY_LENGTH):
            raise JobRejected(
                f"session {field} must be a string of 1 to {MAX_KEY_LENGTH} characters{_TEXT}, "
                f"got {value!r}"
            )
    for permission in session.permissions:
        if not _clean_text(permission, MAX_KEY_LENGTH):
            raise JobRejected(f"session permission must be a short string, got {permission!r}")
    check_seconds("ttl_seconds", ttl_seconds, positive=True)
    if cast(float, ttl_seconds) > MAX_SESSION_SECONDS:
        raise JobRejected(
            f"ttl_seconds must be at most {MAX_SESSION_SECONDS:g}, got {ttl_seconds!r}"
        )


def _text(job: NewJob, field: str, value: object, *, required: bool) -> None:
    if value is None and not required:
        return
    if not _clean_text(value, MAX_KEY_LENGTH):
        raise JobRejected(
            f"job {job.name!r}: {field} must be a string of 1 to {MAX_KEY_LENGTH} characters "
            f"(no NUL), got {value!r}"
        )


def _clean_text(value: object, longest: int | None) -> bool:
    """A non-empty str every database can store: no NUL, valid UTF-8, at most `longest` long."""
    if not isinstance(value, str) or not value or "\x00" in value:
        return False
    if longest is not None and len(value) > longest:
        return False
    if value.isascii():  # the common case, without encoding anything
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def _counter(job: NewJob, field: str, value: object, *, minimum: int) -> None:
    if not _int(value) or not minimum <= value <= MAX_INTEGER:
        raise JobRejected(
            f"job {job.name!r}: {field} must be an integer from {minimum} to {MAX_INTEGER}, "
            f"got {value!r}"
        )


def _fence(job_id: object, fence: object) -> None:
    if not _bigint(fence):
        raise JobRejected(f"job {job_id}: a fence must be a 64-bit integer, got {fence!r}")


def _aware(value: object) -> bool:
    return isinstance(value, datetime) and value.utcoffset() is not None


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    return False


def _bigint(value: object) -> bool:
    return _int(value) and -MAX_BIGINT - 1 <= value <= MAX_BIGINT


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def check_rerun(rerun: Rerun) -> list[str]:
    """Refuse a rerun of an id no job can have, or of a bad job; the job's payload, encoded."""
    check_job_id(rerun.origin)
    return encode_payloads([rerun.job])


def not_finished(state: JobState) -> str:
    """Why a job in `state` is not rerun: the words every store uses."""
    return f"it is {state}: only a finished job (completed, discarded or cancelled) is rerun"


def check_audit_entry(entry: AuditEntry) -> str:
    """Refuse an audit entry without a subject or source, with an unknown action, a bad job id,
    negative counts or a selection that is not a JSON object; the selection as compact JSON."""
    for field, value, required in (
        ("subject", entry.subject, True),
        ("source", entry.source, True),
        ("detail", entry.detail, False),
    ):
        if (required or value != "") and not _clean_text(value, MAX_AUDIT_TEXT):
            raise JobRejected(
                f"audit {field} must be 1 to {MAX_AUDIT_TEXT} characters{_TEXT}, got {value!r}"
            )
    if entry.action not in AUDIT_ACTIONS:
        raise JobRejected(
            f"audit action must be one of {', '.join(AUDIT_ACTIONS)}, got {entry.action!r}"
        )
    if entry.job_id is not None:
        check_job_id(entry.job_id)
    for field, count in (
        ("matched", entry.matched),
        ("changed", entry.changed),
        ("skipped", entry.skipped),
    ):
        check_count(f"audit {field}", count, minimum=0)
    selection = entry.selection
    if not isinstance(selection, Mapping) or _holds_nul(dict(selection)):
        raise JobRejected(f"audit selection must be a JSON object without NUL, got {selection!r}")
    try:
        return _JSON.encode(dict(selection))
    except (TypeError, ValueError) as error:
        raise JobRejected(f"audit selection must be a JSON object: {error}") from None


def check_audit_query(query: AuditQuery) -> None:
    """Refuse an audit page with a bad limit or offset."""
    check_count("audit list limit", query.limit, minimum=0)
    check_count("audit list offset", query.offset, minimum=0)
    if query.job_id is not None:
        check_job_id(query.job_id)


def check_minute_query(query: object) -> None:
    """Refuse a MinuteQuery whose bounds are not timezone-aware datetimes."""
    from ket.store.types import MinuteQuery

    if not isinstance(query, MinuteQuery):
        raise JobRejected(f"a MinuteQuery is needed, got {query!r}")
    for name in ("since", "until"):
        value = getattr(query, name)
        if name == "until" and value is None:
            continue
        if not isinstance(value, datetime) or value.utcoffset() is None:
            raise JobRejected(
                f"MinuteQuery.{name} must be a timezone-aware datetime, got {value!r}"
            )
