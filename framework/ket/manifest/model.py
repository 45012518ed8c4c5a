"""The manifest: everything a deployment declares, as data that can be written, read and diffed.

Validated with pydantic when read back from YAML, so a hand-edited or foreign file is refused with
the offending key named rather than half-understood.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from ket.declare.flow import (
    DEFAULT_UNIQUE_STATES,
    JOB_STATES,
    MAX_EXPIRES_SECONDS,
    MAX_LIMIT,
    MAX_PERIOD_SECONDS,
    MAX_WINDOW_SECONDS,
)
from ket.declare.serve import (
    BEARER,
    DEFAULT_DASHBOARD,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_SHUTDOWN_GRACE_MS,
)
from ket.declare.worker import DEFAULT_RETENTION_MS
from ket.schedule.duration import duration_seconds

FORMAT = 1


class Entry(BaseModel):
    """Base of every manifest entry: frozen, and strict about unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ScheduleEntry(Entry):
    """A job's schedule as declared, with the resolved timezone and its fingerprint."""

    every: str | None = None
    daily_at: str | None = None
    cron: str | None = None
    timezone: str | None = None
    fingerprint: str

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # one schedule kind is set; the others would only be noise in the YAML
        return {k: v for k, v in handler(self).items() if v is not None}


def _seconds(text: str, most: int) -> int:
    """The seconds of a duration of the manifest, or ValueError naming it."""
    seconds = duration_seconds(text) if not text.startswith("0") else None
    if seconds is None or seconds > most:
        raise ValueError(f"not a duration '<count><s|m|h|d>' of at most {most}s: {text!r}")
    return seconds


class ConcurrencyLimitEntry(Entry):
    """At most `limit` attempts running at once, fleet-wide, per value of the `key` fields (in
    their declared order, which is part of the key); no key: the job or queue as a whole."""

    limit: int = Field(ge=1, le=MAX_LIMIT)
    key: list[str] = []

    @model_serializer(mode="wrap")
    def _omit_no_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty(handler(self), "key")


class RateLimitEntry(Entry):
    """At most `limit` attempts started per `period`, fleet-wide, per value of the `key` fields."""

    limit: int = Field(ge=1, le=MAX_LIMIT)
    period: str
    key: list[str] = []

    @field_validator("period")
    @classmethod
    def _period(cls, value: str) -> str:
        _seconds(value, MAX_PERIOD_SECONDS)
        return value

    @property
    def seconds(self) -> int:
        """The period in seconds."""
        return _seconds(self.period, MAX_PERIOD_SECONDS)

    @model_serializer(mode="wrap")
    def _omit_no_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty(handler(self), "key")


class QueueLimitsEntry(Entry):
    """The fleet-wide limits of one queue of the worker: on all its jobs together, so no key."""

    concurrency_limit: ConcurrencyLimitEntry | None = None
    rate_limit: RateLimitEntry | None = None

    @model_validator(mode="after")
    def _no_key(self) -> QueueLimitsEntry:
        for limit in (self.concurrency_limit, self.rate_limit):
            if limit is not None and limit.key:
                raise ValueError(f"a queue's limit takes no key, got {limit.key!r}")
        return self

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class UniqueEntry(Entry):
    """An enqueue joins the newest job of its name and key enqueued within the last `period`
    that is in one of `states` (always written, in the order of the job states, so that a
    change of the default shows); no key: the job as a whole."""

    period: str
    key: list[str] = []
    states: list[str]

    @field_validator("period")
    @classmethod
    def _period(cls, value: str) -> str:
        _seconds(value, MAX_WINDOW_SECONDS)
        return value

    @field_validator("states")
    @classmethod
    def _states(cls, value: list[str]) -> list[str]:
        unknown = [state for state in value if state not in JOB_STATES]
        if unknown:
            raise ValueError(f"not a job state: {unknown[0]!r}")
        if not value or len(set(value)) != len(value):
            raise ValueError(f"states must name job states, each once, got {value!r}")
        # in the states' own order, as a declaration's are: another order is no change
        return [state for state in JOB_STATES if state in value]

    @property
    def seconds(self) -> int:
        """The period in seconds."""
        return _seconds(self.period, MAX_WINDOW_SECONDS)

    @property
    def default_states(self) -> bool:
        """Whether the window counts the states of a declaration that names none."""
        return tuple(self.states) == DEFAULT_UNIQUE_STATES

    @model_serializer(mode="wrap")
    def _omit_no_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty(handler(self), "key")


class DebounceEntry(Entry):
    """A job runs `period` after the last enqueue of its key, no later than `max_wait` after
    its first when given; no key: the job as a whole."""

    period: str
    key: list[str] = []
    max_wait: str | None = None

    @field_validator("period", "max_wait")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            _seconds(value, MAX_WINDOW_SECONDS)
        return value

    @model_validator(mode="after")
    def _max_wait_past_period(self) -> DebounceEntry:
        # a declaration's max_wait is never shorter than its period (KET709)
        if self.max_wait_seconds is not None and self.max_wait_seconds < self.seconds:
            raise ValueError(
                f"max_wait must be at least the period ({self.period!r}), got {self.max_wait!r}"
            )
        return self

    @property
    def seconds(self) -> int:
        """The period in seconds."""
        return _seconds(self.period, MAX_WINDOW_SECONDS)

    @property
    def max_wait_seconds(self) -> int | None:
        """`max_wait` in seconds; None when a job may wait as long as it is enqueued again."""
        return None if self.max_wait is None else _seconds(self.max_wait, MAX_WINDOW_SECONDS)

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty(handler(self), "key", "max_wait")


def _without_empty(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """`data` without the named keys whose values are empty or None: what older manifests lack."""
    return {k: v for k, v in data.items() if k not in names or v}


class OperationEntry(Entry):
    """What functions and jobs share."""

    handler: str
    input: dict[str, Any]
    effects: list[str]
    cross_company: bool


class FunctionEntry(OperationEntry):
    """A function."""


class JobEntry(OperationEntry):
    """A job with every option resolved to its effective value."""

    queue: str
    idempotent: bool
    max_attempts: int
    timeout_ms: int
    priority: int
    backoff: Literal["default", "custom"]
    schedule: ScheduleEntry | None
    # the shape of `input`, and the older shapes a stored payload is upgraded from (manifests
    # written before versions existed have neither: version 1, no upgrades)
    input_version: int = 1
    upgrades_from: list[int] = []
    # the tags its jobs carry unless an enqueue gives others (older manifests: none)
    tags: list[str] = []
    # flow control (older manifests: none): how long a job may wait to start, as declared
    # ('10m'), its fleet-wide limits, and when an enqueue joins an earlier job
    expires_in: str | None = None
    concurrency_limit: ConcurrencyLimitEntry | None = None
    rate_limit: RateLimitEntry | None = None
    unique: UniqueEntry | None = None
    debounce: DebounceEntry | None = None
    # the JSON schema of the result its handler returns (older manifests, and jobs that keep
    # no result: none)
    output: dict[str, Any] | None = None

    @field_validator("expires_in")
    @classmethod
    def _expires_in(cls, value: str | None) -> str | None:
        if value is not None:
            _seconds(value, MAX_EXPIRES_SECONDS)
        return value

    @model_validator(mode="after")
    def _unique_or_debounce(self) -> JobEntry:
        # `ket check` refuses both (KET710): a debounced job has one pending job per key already
        if self.unique is not None and self.debounce is not None:
            raise ValueError("a job has unique or debounce, not both")
        return self

    @property
    def expires_in_seconds(self) -> int | None:
        """`expires_in` in seconds; None when the job never expires."""
        return None if self.expires_in is None else _seconds(self.expires_in, MAX_EXPIRES_SECONDS)

    @model_serializer(mode="wrap")
    def _omit_empty_lists(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # what a job does not declare is left out: its manifest is the one it had before
        return _without_empty(
            handler(self),
            "upgrades_from",
            "tags",
            "expires_in",
            "concurrency_limit",
            "rate_limit",
            "unique",
            "debounce",
            "output",
        )


class ModelEntry(Entry):
    """A model's fields, as shorthand types."""

    fields: dict[str, str]


class ModuleEntry(Entry):
    """A module's members by name."""

    models: dict[str, ModelEntry]
    functions: dict[str, FunctionEntry]
    jobs: dict[str, JobEntry]


class WorkerEntry(Entry):
    """The worker configuration with defaults filled in."""

    queues: dict[str, int]
    poll_min_ms: int
    poll_max_ms: int
    tenant_refresh_ms: int
    lease_ms: int
    shutdown_grace_ms: int
    schedule_sweep_ms: int
    # manifests written before retention was an option: the default, a week for each state
    retention_ms: dict[str, int | None] = Field(default_factory=lambda: dict(DEFAULT_RETENTION_MS))
    # the fleet-wide limits of the queues that declare some (older manifests: none)
    limits: dict[str, QueueLimitsEntry] = {}

    @model_validator(mode="after")
    def _limits_of_queues(self) -> WorkerEntry:
        strays = sorted(set(self.limits) - set(self.queues))
        if strays:
            raise ValueError(f"limits name queues that queues lacks: {', '.join(strays)}")
        return self

    @model_serializer(mode="wrap")
    def _omit_no_limits(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_empty(handler(self), "limits")


class ServeEntry(Entry):
    """How `ket serve` serves the functions, with defaults filled in; the authenticator by its
    `module:qualname`, so a review sees who decides access change."""

    authenticate: str | None
    max_body_bytes: int
    tenant_host: str | None
    shutdown_grace_ms: int
    security_scheme: dict[str, Any]
    # manifests written before the dashboard existed: the default mount
    dashboard: str | None = DEFAULT_DASHBOARD

    @classmethod
    def undeclared(cls) -> ServeEntry:
        """What a deployment that declares no `serve` has: the defaults, no authenticator."""
        return cls(
            authenticate=None,
            max_body_bytes=DEFAULT_MAX_BODY_BYTES,
            tenant_host=None,
            shutdown_grace_ms=DEFAULT_SHUTDOWN_GRACE_MS,
            security_scheme=dict(BEARER),
            dashboard=DEFAULT_DASHBOARD,
        )


class Manifest(Entry):
    """One deployment's manifest."""

    format: Literal[1]
    deployment: str
    modules: dict[str, ModuleEntry]
    worker: WorkerEntry
    # None: the deployment declares no `serve` (and manifests written before it existed)
    serve: ServeEntry | None = None

    @model_serializer(mode="wrap")
    def _omit_no_serve(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # a deployment that declares no `serve` has the manifest it had before serve existed
        data: dict[str, Any] = handler(self)
        if data.get("serve") is None:
            data.pop("serve", None)
        return data

    def jobs(self) -> dict[str, JobEntry]:
        """Every job by qualified name."""
        return {f"{m}.{j}": job for m, mod in self.modules.items() for j, job in mod.jobs.items()}

    def functions(self) -> dict[str, FunctionEntry]:
        """Every function by qualified name."""
        return {
            f"{m}.{f}": fn for m, mod in self.modules.items() for f, fn in mod.functions.items()
        }

    def models(self) -> dict[str, ModelEntry]:
        """Every model by qualified name."""
        return {
            f"{m}.{n}": model for m, mod in self.modules.items() for n, model in mod.models.items()
        }
