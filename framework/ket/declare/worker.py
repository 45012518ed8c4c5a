"""How a deployment's worker runs: queues, their concurrency and limits, polling, leases, sweeps.

A queue is written as its concurrency (`"mail": 4`), or as a dict that adds fleet-wide limits
(`"partners": {"concurrency": 4, "concurrency_limit": 10, "rate_limit": {...}}`). The
configuration keeps the two apart: `queues` maps every queue to its concurrency, as much code
reads it, and `limits` holds the limits of the queues that declare some.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    PositiveInt,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ket.declare.flow import QUEUE_ENTRY_KEYS, QueueLimits, parse_queue_limits
from ket.errors import DeclarationError

DEFAULT_QUEUES = {"default": 10}

# A queue's jobs at once, per tenant: each needs a thread or task and a connection of the pool
# in reach, so a number past this is a typo (an extra zero) rather than a plan.
MAX_CONCURRENCY = 1000
Concurrency = Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]
_CONCURRENCY: TypeAdapter[int] = TypeAdapter(Concurrency)
# The error type of a queue's limits that do not parse: `ket check` reports them on their own.
QUEUE_LIMIT_ERROR = "queue_limit"


def _concurrency_of(entry: Any) -> Any:
    """A queue given as a dict stands for its `concurrency` here (its limits go to `limits`)."""
    if not isinstance(entry, Mapping):
        return entry
    if "concurrency" not in entry:
        raise PydanticCustomError(
            "missing_concurrency",
            "a queue given as a dict needs its 'concurrency' (jobs at once per worker process)",
        )
    return entry["concurrency"]


def _queue_limits(entry: Any) -> QueueLimits:
    try:
        return parse_queue_limits(entry)
    except DeclarationError as error:
        raise PydanticCustomError(
            QUEUE_LIMIT_ERROR, "{message}", {"message": error.message}
        ) from None


def _declares(entry: Mapping[Any, Any], key: object) -> bool:
    """Whether `key` of a queue's dict declares a limit (or is unknown, to be refused); a limit
    written as None is no limit, as on a job."""
    return key != "concurrency" and not (key in QUEUE_ENTRY_KEYS and entry[key] is None)


QueueEntry = Annotated[Concurrency, BeforeValidator(_concurrency_of)]
Limits = Annotated[
    QueueLimits, PlainValidator(_queue_limits), PlainSerializer(lambda limits: limits.declared())
]

# How long finished jobs are kept before the worker's pruner deletes them, by terminal state;
# None keeps them. A partial `retention_ms` keeps these for the states it leaves out.
Finished = Literal["completed", "discarded", "cancelled"]
WEEK_MS = 7 * 86_400_000
DEFAULT_RETENTION_MS: dict[str, int | None] = {
    "completed": WEEK_MS,
    "discarded": WEEK_MS,
    "cancelled": WEEK_MS,
}


class WorkerConfig(BaseModel):
    """The `worker={...}` of a deployment, validated; every queue a job uses must be in `queues`."""

    # strict: a declared value is Python, so True or "50" is a mistake, not a 1 or a 50
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    queues: dict[str, QueueEntry] = Field(default_factory=lambda: dict(DEFAULT_QUEUES))
    # the fleet-wide limits of the queues written as dicts that declare some, by queue
    limits: dict[str, Limits] = Field(default_factory=dict)
    poll_min_ms: PositiveInt = 50
    poll_max_ms: PositiveInt = 2_000
    tenant_refresh_ms: PositiveInt = 30_000
    lease_ms: PositiveInt = 30_000
    shutdown_grace_ms: int = Field(default=15_000, ge=0)
    schedule_sweep_ms: PositiveInt = 30_000
    retention_ms: dict[Finished, PositiveInt | None] = Field(
        default_factory=lambda: dict(DEFAULT_RETENTION_MS)  # type: ignore[arg-type]
    )

    @model_validator(mode="before")
    @classmethod
    def _retention_defaults(cls, data: Any) -> Any:
        # the states a partial retention_ms leaves out keep their defaults
        if isinstance(data, Mapping) and isinstance(data.get("retention_ms"), Mapping):
            data = {**data, "retention_ms": {**DEFAULT_RETENTION_MS, **data["retention_ms"]}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _queue_limits(cls, data: Any) -> Any:
        # a queue written as a dict with more than its concurrency declares limits
        queues = data.get("queues") if isinstance(data, Mapping) else None
        if not isinstance(queues, Mapping):
            return data
        declared = {
            name: entry
            for name, entry in queues.items()
            if isinstance(entry, Mapping) and any(_declares(entry, key) for key in entry)
        }
        if declared:
            data = {**data, "limits": {**data.get("limits", {}), **declared}}
        return data

    @model_validator(mode="after")
    def _poll_range(self) -> WorkerConfig:
        if self.poll_max_ms < self.poll_min_ms:
            raise ValueError(
                f"poll_max_ms ({self.poll_max_ms}) must be at least "
                f"poll_min_ms ({self.poll_min_ms})"
            )
        if not self.queues:
            raise ValueError("queues must name at least one queue")
        strays = sorted(set(self.limits) - set(self.queues))
        if strays:
            raise ValueError(f"limits name queues that queues lacks: {', '.join(strays)}")
        return self

    def require_queue(self, queue: str) -> str:
        """`queue` if this configuration declares it, else ValueError naming it and those it
        declares."""
        if queue not in self.queues:
            declared = ", ".join(sorted(self.queues))
            raise ValueError(f"queue {queue!r} is not declared (declared: {declared})")
        return queue

    def with_concurrency(self, concurrency: Mapping[str, int]) -> WorkerConfig:
        """This configuration with the concurrency of some of its queues replaced (an operator's
        per-host setting), held to the rule of a declared one; ValueError naming a queue the
        configuration lacks, or a concurrency out of range.

        >>> WorkerConfig().with_concurrency({"default": 50}).queues
        {'default': 50}
        """
        for queue, value in concurrency.items():
            self.require_queue(queue)
            check_concurrency(value)
        return WorkerConfig.model_validate(
            {**self.model_dump(), "queues": {**self.queues, **concurrency}}
        )

    def serving(self, queues: Collection[str]) -> WorkerConfig:
        """This configuration with only `queues` (the ones a host serves), each at its
        concurrency here; ValueError naming a queue the configuration lacks, or no queue.

        >>> WorkerConfig(queues={"default": 2, "mail": 4}).serving(["mail"]).queues
        {'mail': 4}
        """
        for queue in queues:
            self.require_queue(queue)
        kept = {queue: n for queue, n in self.queues.items() if queue in queues}
        return WorkerConfig.model_validate({**self.model_dump(), "queues": kept})


def check_concurrency(value: object) -> int:
    """`value` if it is a queue's concurrency (a whole number from 1 to MAX_CONCURRENCY), else
    ValueError naming it."""
    try:
        return _CONCURRENCY.validate_python(value, strict=True)
    except ValidationError:
        raise ValueError(
            f"a queue's concurrency must be a whole number from 1 to {MAX_CONCURRENCY}, "
            f"got {value!r}"
        ) from None
