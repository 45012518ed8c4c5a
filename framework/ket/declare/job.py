"""define_job: a durable background job."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ket.declare.operation import Handler, OperationDecl, effect_tuple
from ket.declare.source import caller

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 20
DEFAULT_TIMEOUT_MS = 300_000
DEFAULT_PRIORITY = 0

Backoff = Callable[[int], float]
# An upgrade takes a stored payload of one input version and returns it as the next version's.
Upgrade = Callable[[dict[str, Any]], Mapping[str, Any]]


def default_backoff_seconds(attempt: int) -> float:
    """The backoff before jitter: `min(2**attempt * 10, 86_400)` seconds."""
    return float(min(2 ** max(attempt, 1) * 10, 86_400))


@dataclass(frozen=True, kw_only=True)
class JobDecl(OperationDecl):
    """A declared job (values as written; `ket check` validates them)."""

    queue: object = DEFAULT_QUEUE
    idempotent: object = False
    max_attempts: object = DEFAULT_MAX_ATTEMPTS
    timeout_ms: object = DEFAULT_TIMEOUT_MS
    priority: object = DEFAULT_PRIORITY
    backoff: object = None
    schedule: object = None
    input_version: object = 1
    upgrade: object = None
    tags: object = ()
    expires_in: object = None
    concurrency_limit: object = None
    rate_limit: object = None
    unique: object = None
    debounce: object = None
    output: object = None


def define_job(
    *,
    handler: Handler,
    queue: str = DEFAULT_QUEUE,
    input: object = None,
    effects: Iterable[str] | None = None,
    idempotent: bool = False,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    priority: int = DEFAULT_PRIORITY,
    backoff: Backoff | None = None,
    schedule: Mapping[str, str] | None = None,
    cross_company: bool = False,
    input_version: int = 1,
    upgrade: Mapping[int, Upgrade] | None = None,
    tags: Iterable[str] = (),
    expires_in: str | None = None,
    concurrency_limit: int | Mapping[str, object] | None = None,
    rate_limit: Mapping[str, object] | None = None,
    unique: Mapping[str, object] | None = None,
    debounce: Mapping[str, object] | None = None,
    output: object = None,
) -> JobDecl:
    """Declare a job: `handler(ctx, input) -> None`, sync or async, run at least once.

    `output` (a dict of field types, as `input`, or a pydantic model class) declares what the
    handler returns: the value is validated and stored as the job's result when it completes
    (`ket jobs show`, `client.job`); without it, a returned value is not kept.

    Example::

        define_job(
            queue="mail",
            input={"order_id": "id"},
            effects=["read:sales.Order", "transport:send"],
            idempotent=True,
            max_attempts=8,
            timeout_ms=30_000,
            handler=send_confirmation,
        )

    `input_version` numbers the shape of `input`; when it changes, raise the version and give
    `upgrade={old_version: fn}`, where `fn(payload) -> payload` turns a stored payload of
    `old_version` into one of the next version: rows already queued are upgraded as they run.

    `tags` label every job enqueued (unless the enqueue gives its own), to find them by:
    `ket jobs list --tag billing`, `ket jobs retry --tag billing`.

    Flow control, each enforced across every worker of the fleet:

    - `expires_in="10m"`: a job not started within that long of its run time is discarded
      with the reason `expired`, never started late (a duration `<count><s|m|h|d>`);
    - `concurrency_limit=3`: at most 3 of its attempts run at once;
    - `rate_limit={"limit": 20, "period": "1s"}`: at most 20 of its attempts start per period.

    A limit given as a dict may add `"key": [fields]`, input fields of the job: each distinct
    combination of their values is limited on its own, and jobs of other values go on::

        define_job(
            queue="partners",
            input={"customer_id": "id", "partner": "string"},
            idempotent=True,
            expires_in="10m",
            concurrency_limit={"limit": 1, "key": ["customer_id"]},
            rate_limit={"limit": 10, "period": "1m", "key": ["partner"]},
            handler=sync_customer,
        )

    An enqueue may join an earlier job of the same key instead of writing one:

    - `unique={"period": "1h", "key": ["customer_id"]}`: at most one job per key enqueued in
      any hour, counting jobs that are active or completed (`"states": [...]` chooses others);
    - `debounce={"period": "30s", "key": ["customer_id"]}`: the job runs 30 s after the last
      enqueue of its key; an enqueue before it starts gives it the new input and moves it back
      (`"max_wait": "5m"` bounds how far from its first enqueue).
    """
    source = caller()
    return JobDecl(
        handler=handler,
        queue=queue,
        input=input,
        effects=effect_tuple(effects, source),
        idempotent=idempotent,
        max_attempts=max_attempts,
        timeout_ms=timeout_ms,
        priority=priority,
        backoff=backoff,
        schedule=schedule,
        cross_company=cross_company,
        input_version=input_version,
        upgrade=upgrade,
        tags=tags,
        expires_in=expires_in,
        concurrency_limit=concurrency_limit,
        rate_limit=rate_limit,
        unique=unique,
        debounce=debounce,
        output=output,
        source=source,
    )
