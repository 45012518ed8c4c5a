"""What every store refuses before writing anything: bad jobs and bad call params.

Shared by all stores so they refuse the same things with the same words.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime

from ket.errors import JobRejected
from ket.store.types import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    TERMINAL_STATES,
    Heartbeat,
    JobClaim,
    NewJob,
    Prune,
    Settle,
)

MAX_PAYLOAD_BYTES = 1_048_576
MAX_NAME_LENGTH = 200
MAX_KEY_LENGTH = 500
# a century: any longer staleness means "never", and would overflow date arithmetic
MAX_STALE_SECONDS = 3_153_600_000
OUTCOMES = ("completed", "retryable", "discarded", "snoozed", "cancelled")


def encode_payloads(jobs: Sequence[NewJob], *, limit: int = MAX_PAYLOAD_BYTES) -> list[str]:
    """Check every job, return each payload as compact JSON; JobRejected names the first bad."""
    encoded = []
    for job in jobs:
        check_new_job(job)
        encoded.append(encode_payload(job, limit=limit))
    return encoded


def check_new_job(job: NewJob) -> None:
    """Refuse a job whose fields are out of range, naming the job and the value."""
    if not isinstance(job.name, str) or not job.name or len(job.name) > MAX_NAME_LENGTH:
        raise JobRejected(f"job name must be 1 to {MAX_NAME_LENGTH} characters, got {job.name!r}")
    _text(job, "queue", job.queue, required=True)
    _text(job, "unique_key", job.unique_key, required=False)
    _text(job, "company", job.company, required=False)
    if not _int(job.priority) or not PRIORITY_MIN <= job.priority <= PRIORITY_MAX:
        raise JobRejected(
            f"job {job.name!r}: priority must be an integer from {PRIORITY_MIN} to "
            f"{PRIORITY_MAX}, got {job.priority!r}"
        )
    if not _int(job.max_attempts) or job.max_attempts < 1:
        raise JobRejected(
            f"job {job.name!r}: max_attempts must be a positive integer, got {job.max_attempts!r}"
        )
    if not _int(job.payload_version) or job.payload_version < 1:
        raise JobRejected(
            f"job {job.name!r}: payload_version must be a positive integer, "
            f"got {job.payload_version!r}"
        )
    for field, value in (("run_at", job.run_at), ("tick", job.tick)):
        if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
            raise JobRejected(
                f"job {job.name!r}: {field} must be a timezone-aware datetime, got {value!r}"
            )


def encode_payload(job: NewJob, *, limit: int = MAX_PAYLOAD_BYTES) -> str:
    """The payload as compact JSON, refused if it is not a JSON object or exceeds `limit` bytes."""
    if not isinstance(job.payload, dict):
        raise JobRejected(f"job {job.name!r}: payload must be a JSON object, got {job.payload!r}")
    try:
        text = json.dumps(job.payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise JobRejected(f"job {job.name!r}: payload is not JSON-serialisable: {error}") from None
    size = len(text.encode("utf-8"))
    if size > limit:
        raise JobRejected(
            f"job {job.name!r}: payload is {size} bytes, over the limit of {limit} bytes; "
            "store large data in a model or in storage and enqueue a reference"
        )
    return text


def check_claim(claim: JobClaim) -> None:
    """Refuse a claim with a non-positive limit or lease."""
    if not _int(claim.limit) or claim.limit < 1:
        raise JobRejected(f"claim limit must be a positive integer, got {claim.limit!r}")
    _positive("lease_seconds", claim.lease_seconds)
    if not claim.queue or not claim.worker_id:
        raise JobRejected(f"a claim needs a queue and a worker id, got {claim!r}")


def check_settlements(settlements: Sequence[Settle]) -> None:
    """Refuse unknown outcomes and negative or infinite delays."""
    for settle in settlements:
        if settle.outcome not in OUTCOMES:
            raise JobRejected(f"job {settle.id}: unknown outcome {settle.outcome!r}")
        delay = settle.delay_seconds
        if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
            raise JobRejected(f"job {settle.id}: delay_seconds must not be negative, got {delay!r}")


def check_heartbeat(heartbeat: Heartbeat) -> None:
    """Refuse a non-positive lease."""
    _positive("lease_seconds", heartbeat.lease_seconds)


def check_prune(prune: Prune) -> None:
    """Refuse negative retention, a non-positive limit, or states that are not terminal."""
    if not isinstance(prune.older_than_seconds, int | float) or prune.older_than_seconds < 0:
        raise JobRejected(
            f"prune older_than_seconds must not be negative, got {prune.older_than_seconds!r}"
        )
    if not _int(prune.limit) or prune.limit < 1:
        raise JobRejected(f"prune limit must be a positive integer, got {prune.limit!r}")
    bad = [s for s in prune.states if s not in TERMINAL_STATES]
    if bad or not prune.states:
        raise JobRejected(f"prune removes terminal states only, got {prune.states!r}")


def check_message_key(key: object) -> None:
    """Refuse an idempotency key that is not a string of 1 to MAX_KEY_LENGTH characters."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise JobRejected(
            f"message key must be a string of 1 to {MAX_KEY_LENGTH} characters, got {key!r}"
        )


def check_message_claim(key: object, stale_after_seconds: object) -> None:
    """Refuse a bad key, or a staleness that is negative or not a finite number of seconds."""
    check_message_key(key)
    stale = stale_after_seconds
    if isinstance(stale, bool) or not isinstance(stale, int | float):
        raise JobRejected(f"stale_after_seconds must be a number of seconds, got {stale!r}")
    if not math.isfinite(stale) or not 0 <= stale <= MAX_STALE_SECONDS:
        raise JobRejected(
            f"stale_after_seconds must be from 0 to {MAX_STALE_SECONDS}, got {stale!r}"
        )


def _text(job: NewJob, field: str, value: object, *, required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_LENGTH:
        raise JobRejected(
            f"job {job.name!r}: {field} must be a string of 1 to {MAX_KEY_LENGTH} characters, "
            f"got {value!r}"
        )


def _positive(field: str, value: object) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise JobRejected(f"{field} must be a positive number of seconds, got {value!r}")


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
