"""The catalog: a checked deployment resolved for running, and the one place jobs are built.

Producers (the handler context, the client, the test helpers) and the worker all look jobs up
here, so a job is validated, defaulted and turned into a `NewJob` the same way wherever it is
enqueued from: its secret input fields sealed (or marked) the same way too, and opened again
only when the worker builds its handler's input.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from ket import trace
from ket.check import error_messages, run_checks
from ket.declare import resolve
from ket.declare.deployment import DeploymentDecl
from ket.declare.effect import Effect
from ket.declare.flow import ConcurrencyLimit, Debounce, QueueLimits, RateLimit, UniqueWindow
from ket.declare.job import JobDecl, Upgrade, default_backoff_seconds
from ket.declare.operation import Handler, OperationDecl
from ket.declare.serve import ServeConfig
from ket.declare.worker import WorkerConfig
from ket.due import RunAt, RunIn, delay_seconds, due
from ket.errors import (
    CheckFailed,
    DeclarationError,
    JobRejected,
    PayloadVersionError,
    ResultRejected,
)
from ket.limits import MAX_RESULT_BYTES
from ket.schedule import Schedule
from ket.secret import (
    Redact,
    SecretKeys,
    holds_secrets,
    open_payload,
    plain_payload,
    plain_payloads,
    seal_payload,
)
from ket.store.types import ClaimLimits, JobLimits, ModelTable, NewJob, Rate, Window

Backoff = Callable[[int], float]


@dataclass(frozen=True, kw_only=True, slots=True)
class EnqueueOptions:
    """How a job is enqueued besides its name and input, the one type every enqueue path hands
    to `Catalog.new_job` (the clients, ctx.jobs, the test deployment, `ket jobs enqueue`, the
    third member of an `enqueue_many` item); None keeps the declaration's default. `run_at` (an
    aware datetime or ISO-8601 text) and `run_in` (a delay from the store's now) exclude each
    other (ket.due); `tags` given replace the declared ones; `expires_in` (a duration, as
    `run_in`) replaces the declared expiry, counted from the job's run time."""

    run_at: RunAt | None = None
    run_in: RunIn | None = None
    priority: int | None = None
    unique_key: str | None = None
    company: str | None = None
    tags: list[str] | tuple[str, ...] | None = None
    expires_in: RunIn | None = None

    @classmethod
    def given(
        cls,
        *,
        run_at: RunAt | None = None,
        run_in: RunIn | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        expires_in: RunIn | None = None,
    ) -> EnqueueOptions:
        """The options of an enqueue call's keywords: NO_OPTIONS when none is given (the plain
        enqueue new_job builds fastest)."""
        if (
            run_at is None
            and run_in is None
            and priority is None
            and unique_key is None
            and company is None
            and tags is None
            and expires_in is None
        ):
            return NO_OPTIONS
        return cls(
            run_at=run_at,
            run_in=run_in,
            priority=priority,
            unique_key=unique_key,
            company=company,
            tags=tags,
            expires_in=expires_in,
        )

    @classmethod
    def of(
        cls,
        job: str,
        given: EnqueueOptions | Mapping[str, Any] | None,
        *,
        company: str | None = None,
    ) -> EnqueueOptions:
        """The options of an `enqueue_many` item (a mapping of the names above, or options),
        `company` where they name none (ctx.jobs: the attempt's); JobRejected naming any other
        name."""
        if isinstance(given, EnqueueOptions):
            if given.company is None and company is not None:
                return replace(given, company=company)
            return given
        given = given or {}
        unknown = sorted(set(given) - set(cls.__slots__))
        if unknown:
            raise JobRejected(
                f"job {job!r}: unknown enqueue options {unknown} "
                f"(known: {', '.join(cls.__slots__)})"
            )
        if company is not None and given.get("company") is None:
            return cls.given(**{**given, "company": company})
        return cls.given(**given)


NO_OPTIONS = EnqueueOptions()


_NO_KEYS: tuple[None, None] = (None, None)  # a job under no fleet-wide limit
# a key's values as compact JSON (an encoder made once: a call per enqueued job)
_KEY_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


@dataclass(frozen=True, slots=True)
class LimitKeys:
    """The keys a job's rows carry under fleet-wide limits, each `<job name>|<the key fields'
    values as JSON>`: a concurrency key when its job or queue has a concurrency limit (the
    job's key fields; none for the queue's), a rate key when its job has a rate limit."""

    name: str
    concurrency: tuple[str, ...] | None  # None: no concurrency limit applies
    rate: tuple[str, ...] | None

    @classmethod
    def of(
        cls,
        name: str,
        concurrency: ConcurrencyLimit | None,
        rate: RateLimit | None,
        queue: QueueLimits | None,
    ) -> LimitKeys | None:
        queue_wide = queue is not None and queue.concurrency_limit is not None
        fields = concurrency.key if concurrency else (() if queue_wide else None)
        if fields is None and rate is None:
            return None
        return cls(name, fields, None if rate is None else rate.key)

    def of_payload(self, payload: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """The concurrency and rate keys of a job with this (validated, JSON-ready) payload."""
        return self._key(self.concurrency, payload), self._key(self.rate, payload)

    def _key(self, fields: tuple[str, ...] | None, payload: Mapping[str, Any]) -> str | None:
        if fields is None:
            return None
        values = [payload.get(name) for name in fields]  # a missing value is a value of its own
        return f"{self.name}|{_KEY_JSON(values)}"


@dataclass(frozen=True, kw_only=True)
class OperationSpec:
    """A function or job ready to run: its handler, validated input model and effects."""

    name: str
    handler: Handler
    input_model: type[BaseModel]
    effects: frozenset[Effect]
    cross_company: bool
    secret: bool = False  # its input may hold secret fields

    def allows(self, verb: str, target: str) -> bool:
        """Whether the declared effects cover `verb:target` (`write` also covers reading)."""
        if Effect(verb=verb, target=target) in self.effects:  # type: ignore[arg-type]
            return True
        return verb == "read" and Effect(verb="write", target=target) in self.effects


@dataclass(frozen=True, kw_only=True)
class JobSpec(OperationSpec):
    """A job ready to run."""

    queue: str
    priority: int
    max_attempts: int
    timeout_seconds: float
    backoff: Backoff
    schedule: Schedule | None
    input_version: int = 1
    upgrades: Mapping[int, Upgrade] = field(default_factory=dict)  # by the version upgraded from
    tags: tuple[str, ...] = ()
    # declared with no input (shorthand): nothing to validate, and its payload is always {}
    no_input: bool = False
    # not started within this many seconds of its run time: discarded as expired (None: never)
    expires_in_seconds: float | None = None
    # its fleet-wide limits (None: none); `limit_keys` says which keys its jobs carry
    concurrency_limit: ConcurrencyLimit | None = None
    rate_limit: RateLimit | None = None
    limit_keys: LimitKeys | None = None
    # how an enqueue joins an earlier job of its key (None: only by an active unique_key), and
    # the input fields that make the key
    window: Window | None = None
    window_fields: tuple[str, ...] = ()
    # what its handler returns, kept as its result (None: a returned value is not kept), and
    # whether that may hold secret fields (sealed as an input's are)
    output_model: type[BaseModel] | None = None
    output_secret: bool = False


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """The deployment's jobs and functions by qualified name, and how its worker runs them and
    `ket serve` serves them."""

    deployment: str
    jobs: Mapping[str, JobSpec]
    functions: Mapping[str, OperationSpec]
    models: Mapping[str, ModelTable]
    worker: WorkerConfig
    keys: SecretKeys | None = None  # KET_SECRET_KEYS: None stores secrets in clear (marked)
    redact: Redact | None = None  # the deployment's hook for exception texts
    tracing: bool = False  # KET_OTEL=1: OpenTelemetry spans for enqueues and attempts
    serve: ServeConfig = field(default_factory=ServeConfig)
    # by queue, the fleet-wide limits a claim of it keeps (only the queues that have some)
    claim_limits: Mapping[str, ClaimLimits] = field(default_factory=dict)
    # the job each name makes when it takes no input and no options: one value, made once
    _plain: dict[str, NewJob] = field(default_factory=dict, repr=False, compare=False)
    # by job name, the validator of a list of its inputs (new_jobs), made on first use
    _lists: dict[str, TypeAdapter[list[Any]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    @classmethod
    def build(
        cls,
        deployment: DeploymentDecl,
        *,
        timezone: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Catalog:
        """Resolve a deployment; CheckFailed if `ket check` finds errors in it, SecretKeyError
        if `KET_SECRET_KEYS` (read from `environ`, default the process's) is malformed."""
        timezone = timezone or resolve.default_timezone()
        errors = error_messages(run_checks(deployment, timezone=timezone))
        if errors:
            raise CheckFailed(errors)
        worker = resolve.worker_config(deployment)
        jobs = {job.qualified_name: _job(job, timezone, worker) for job in deployment.jobs()}
        return cls(
            deployment=deployment.name,
            jobs=jobs,
            claim_limits=_claim_limits(jobs, worker),
            functions={fn.qualified_name: _operation(fn) for fn in deployment.functions()},
            models={
                model.qualified_name: ModelTable(
                    name=model.qualified_name, fields={k: str(v) for k, v in model.fields.items()}
                )
                for model in deployment.models()
            },
            worker=worker,
            keys=SecretKeys.from_environment(environ),
            redact=deployment.redact,
            serve=resolve.serve_config(deployment),
            tracing=trace.enabled(environ),
        )

    def job(self, name: str) -> JobSpec:
        """The job called `name`, or JobRejected naming it and the jobs that exist."""
        spec = self.jobs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.jobs)) or "none"
            raise JobRejected(f"unknown job {name!r} in deployment {self.deployment!r} ({known})")
        return spec

    def new_job(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        options: EnqueueOptions = NO_OPTIONS,
        *,
        tick: datetime | None = None,
        ticks_skipped: int | None = None,
    ) -> NewJob:
        """A job to insert: input validated (pydantic ValidationError naming the field), defaults
        from the declaration filled in, as `options` say (JobRejected naming a bad one). `tick`
        and `ticks_skipped`: the schedule tick a sweep enqueues it for."""
        bare = input is None and options is NO_OPTIONS and tick is None and ticks_skipped is None
        if bare and name in self._plain:
            return self._plain[name]
        spec = self.job(name)
        if input is not None and type(input) is not dict and not isinstance(input, _INPUTS):
            raise JobRejected(_not_a_mapping(spec, input))
        payload: dict[str, Any]
        if spec.no_input and not input and not isinstance(input, BaseModel):
            payload = {}  # what validating and dumping nothing gives, without pydantic's cost
        elif spec.secret:
            payload = seal_payload(validate_input(spec, input), self.keys, job=name)
        else:
            payload = plain_payload(validate_input(spec, input), job=name)
        job = self._job(name, spec, payload, options, tick, ticks_skipped)
        if bare and spec.no_input and not self.tracing:  # a traced enqueue is a span of its own
            self._plain[name] = job
        return job

    def job_result(self, name: str, value: object) -> str | None:
        """What job `name`'s handler returned, as the JSON text its result is stored as: None
        when it declares no output (or returned None); else validated against its output, its
        secret fields sealed as an input's are, at most MAX_RESULT_BYTES. ResultRejected names
        what is wrong."""
        spec = self.job(name)
        model = spec.output_model
        if model is None or value is None:
            return None
        try:
            if isinstance(value, BaseModel) and not isinstance(value, model):
                value = value.model_dump()
            result = model.model_validate(value)
        except ValidationError as error:
            raise ResultRejected(
                f"{name} returned a value that is not its output: {_errors_of(error)}"
            ) from None
        if spec.output_secret:
            shown = seal_payload(result, self.keys, job=name)
        else:
            shown = plain_payload(result, job=name)
        text = json.dumps(shown, separators=(",", ":"), ensure_ascii=False)
        size = len(text.encode())
        if size > MAX_RESULT_BYTES:
            raise ResultRejected(
                f"{name} returned a result of {size} bytes, over the limit of {MAX_RESULT_BYTES}: "
                "keep large data in ctx.storage and return its key"
            )
        return text

    def _job(
        self,
        name: str,
        spec: JobSpec,
        payload: dict[str, Any],
        options: EnqueueOptions,
        tick: datetime | None,
        ticks_skipped: int | None,
    ) -> NewJob:
        """The job of a validated payload, as new_job makes it (new_jobs too)."""
        run_at, run_in, tags = options.run_at, options.run_in, options.tags
        at, delay = None, 0.0
        if run_at is not None or run_in is not None:  # most enqueues are due now: no call
            try:
                at, delay = due(run_at, run_in)
            except ValueError as error:
                raise JobRejected(f"job {name!r}: {error}") from None
        if tags is not None:
            try:
                tags = resolve.tags(tags)
            except DeclarationError as error:
                raise JobRejected(f"job {name!r}: {error}") from None
        expires_in = spec.expires_in_seconds
        if options.expires_in is not None:
            try:
                expires_in = delay_seconds(options.expires_in, name="expires_in", positive=True)
            except ValueError as error:
                raise JobRejected(f"job {name!r}: {error}") from None
        keys = _NO_KEYS if spec.limit_keys is None else spec.limit_keys.of_payload(payload)
        unique_key, window_key = options.unique_key, None
        if spec.window is not None:  # the window is keyed by the enqueue's key, or the fields'
            window_key = unique_key
            if window_key is None:
                window_key = _KEY_JSON([payload.get(name) for name in spec.window_fields])
            unique_key = None
            if spec.window.debounce:  # it runs a period after its enqueue's run time
                if at is None:
                    delay += spec.window.seconds
                else:
                    at += timedelta(seconds=spec.window.seconds)
        return NewJob(
            name=name,
            queue=spec.queue,
            payload=payload,
            run_at=at,
            delay_seconds=delay,
            priority=spec.priority if options.priority is None else options.priority,
            max_attempts=spec.max_attempts,
            payload_version=spec.input_version,
            unique_key=unique_key,
            company=options.company,
            tick=tick,
            ticks_skipped=ticks_skipped,
            tags=spec.tags if tags is None else tags,
            trace_context=trace.enqueue_context(name, spec.queue) if self.tracing else None,
            expires_in_seconds=expires_in,
            concurrency_key=keys[0],
            rate_key=keys[1],
            window_key=window_key,
            window=spec.window,
        )

    def new_jobs(self, name: str, inputs: list[Any]) -> list[NewJob]:
        """`new_job(name, input)` for each of `inputs` (no options), the inputs validated and
        dumped in one pass each (a pydantic TypeAdapter over their list): the work per job of
        a bulk enqueue, less the calls per job. A job whose jobs need more than their inputs
        (secret fields, a window's key, a trace of each enqueue), inputs other than dicts, or
        an input that does not validate go one at a time, through new_job itself: a refusal
        names the first bad input as it would alone."""
        spec = self.job(name)
        plain = not (spec.secret or spec.no_input or spec.window is not None or self.tracing)
        if not plain or len(inputs) < 2 or any(type(input) is not dict for input in inputs):
            return [self.new_job(name, input) for input in inputs]
        adapter = self._lists.get(name)
        if adapter is None:
            adapter = self._lists[name] = TypeAdapter(list[spec.input_model])  # type: ignore[name-defined]
        try:
            models = adapter.validate_python(inputs)
        except ValidationError:
            return [self.new_job(name, input) for input in inputs]
        payloads = plain_payloads(adapter.dump_python(models, mode="json"), job=name)
        return [self._job(name, spec, payload, NO_OPTIONS, None, None) for payload in payloads]

    def job_input(
        self, spec: OperationSpec, payload: dict[str, Any], version: int = 1
    ) -> tuple[BaseModel, list[str]]:
        """A stored payload of input `version` as its handler's input, and the secret values it
        held (to keep them out of error texts).

        An older payload goes through the job's upgrades first, one version at a time;
        PayloadVersionError when none reaches it or it is newer than the job. SecretKeyError,
        naming the field, when a sealed secret cannot be opened; pydantic's ValidationError when
        the payload does not fit the input; UpgradeFailed when an upgrade raises."""
        data, secrets = open_payload(payload, self.keys)  # it copies what it opens
        if isinstance(spec, JobSpec) and version != spec.input_version:
            try:
                data = upgraded(spec, data, version)
            except PayloadVersionError:
                raise
            except Exception as error:
                raise UpgradeFailed(error, secrets) from error
        return spec.input_model.model_validate(data), secrets


class UpgradeFailed(Exception):
    """An upgrade raised `error` (or returned no dict); `secrets` are the payload's secret
    values, to keep out of the error's text."""

    def __init__(self, error: Exception, secrets: list[str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.secrets = secrets


def upgraded(spec: JobSpec, data: dict[str, Any], version: int) -> dict[str, Any]:
    """`data`, a payload of input `version`, brought to the job's input version."""
    if version > spec.input_version:
        raise PayloadVersionError(
            f"its payload is of input version {version}, newer than this deployment's "
            f"{spec.input_version} of {spec.name}: a newer deployment enqueued it",
            newer=True,
        )
    for step in range(version, spec.input_version):
        upgrade = spec.upgrades.get(step)
        if upgrade is None:
            reachable = ", ".join(str(v) for v in sorted(spec.upgrades)) or "none"
            raise PayloadVersionError(
                f"its payload is of input version {version} and {spec.name} has no upgrade "
                f"from version {step} (upgrades from: {reachable})",
                newer=False,
            )
        result = upgrade(data)
        if not isinstance(result, Mapping):
            raise TypeError(
                f"the upgrade of {spec.name} from input version {step} returned "
                f"{type(result).__name__}, not a dict"
            )
        data = dict(result)
    return data


# what an enqueue's input may be besides a dict (checked after it: the ABC check costs more)
_INPUTS = (BaseModel, Mapping)


def _not_a_mapping(spec: OperationSpec, input: object) -> str:
    """Why input that is no mapping is refused: its type (its value may hold a secret)."""
    fields = list(spec.input_model.model_fields)
    hint = (
        f"pass a dict of its fields ({', '.join(fields)})"
        if fields
        else "pass nothing: it declares no input"
    )
    return (
        f"job {spec.name!r}: input must be a mapping (or its input model), "
        f"got {type(input).__name__}; hint: {hint}"
    )


def validate_input(spec: OperationSpec, input: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    """The operation's input model instance for `input` (a mapping, a model, or nothing).

    For an input with secret fields, the ValidationError does not quote the values it refused:
    a misplaced secret would otherwise be in the message."""
    if isinstance(input, spec.input_model):
        return input
    if isinstance(input, BaseModel):
        input = input.model_dump()
    try:
        return spec.input_model.model_validate(dict(input or {}))
    except ValidationError as error:
        if not spec.secret:
            raise
        raise _without_input(error) from None


def _without_input(error: ValidationError) -> ValidationError:
    """The same errors (field, type, message) without the input values they quote."""
    details: list[InitErrorDetails] = []
    for item in error.errors(include_url=False):
        # the rendered message, as a custom error without context (so never re-rendered)
        details.append(
            {
                "type": PydanticCustomError(item["type"], item["msg"]),
                "loc": item["loc"],
                "input": None,
            }
        )
    return ValidationError.from_exception_data(error.title, details, hide_input=True)


def jittered(seconds: float) -> float:
    """`seconds` give or take 10%, so failures of many jobs do not retry in lockstep."""
    return max(0.0, seconds * random.uniform(0.9, 1.1))


def _operation(decl: OperationDecl) -> OperationSpec:
    model = resolve.input_model(decl)
    return OperationSpec(
        name=decl.qualified_name,
        handler=decl.handler,
        input_model=model,
        effects=frozenset(resolve.effects(decl)),
        cross_company=bool(decl.cross_company),
        secret=holds_secrets(model),
    )


def _job(decl: JobDecl, timezone: str | None, worker: WorkerConfig) -> JobSpec:
    custom = decl.backoff
    backoff: Backoff = custom if callable(custom) else default_backoff
    model = resolve.input_model(decl)
    return JobSpec(
        name=decl.qualified_name,
        handler=decl.handler,
        input_model=model,
        effects=frozenset(resolve.effects(decl)),
        cross_company=bool(decl.cross_company),
        secret=holds_secrets(model),
        queue=str(decl.queue),
        priority=int(decl.priority),  # type: ignore[call-overload]
        max_attempts=int(decl.max_attempts),  # type: ignore[call-overload]
        timeout_seconds=int(decl.timeout_ms) / 1000,  # type: ignore[call-overload]
        backoff=backoff,
        schedule=resolve.schedule(decl, timezone),
        input_version=int(decl.input_version),  # type: ignore[call-overload]
        upgrades=dict(decl.upgrade or {}),  # type: ignore[call-overload]
        tags=resolve.tags(decl.tags),
        no_input=not isinstance(decl.input, type) and not model.model_fields,
        expires_in_seconds=resolve.expires_in(decl),
        concurrency_limit=(concurrency := resolve.concurrency_limit(decl)),
        rate_limit=(rate := resolve.rate_limit(decl)),
        limit_keys=LimitKeys.of(
            decl.qualified_name, concurrency, rate, worker.limits.get(str(decl.queue))
        ),
        window=_window(unique := resolve.unique(decl), debounce := resolve.debounce(decl)),
        window_fields=unique.key if unique else debounce.key if debounce else (),
        output_model=(output := resolve.output_model(decl)),
        output_secret=output is not None and holds_secrets(output),
    )


def _window(unique: UniqueWindow | None, debounce: Debounce | None) -> Window | None:
    """The store's view of a job's uniqueness window or debounce (ket check allows one)."""
    if unique is not None:
        return Window(seconds=unique.seconds, states=unique.states)  # type: ignore[arg-type]
    if debounce is not None:
        return Window(
            seconds=debounce.seconds, debounce=True, max_wait_seconds=debounce.max_wait_seconds
        )
    return None


def _claim_limits(jobs: Mapping[str, JobSpec], worker: WorkerConfig) -> dict[str, ClaimLimits]:
    """By queue, the limits its claims keep: its jobs' and its own."""
    by_queue: dict[str, dict[str, JobLimits]] = {}
    for spec in jobs.values():
        if spec.concurrency_limit or spec.rate_limit:
            by_queue.setdefault(spec.queue, {})[spec.name] = JobLimits(
                concurrency=spec.concurrency_limit.limit if spec.concurrency_limit else None,
                rate=_rate(spec.rate_limit),
            )
    queues = set(by_queue) | set(worker.limits)
    limits: dict[str, ClaimLimits] = {}
    for queue in sorted(queues):
        own = worker.limits.get(queue)
        limits[queue] = ClaimLimits(
            jobs=by_queue.get(queue, {}),
            concurrency=own.concurrency_limit.limit if own and own.concurrency_limit else None,
            rate=_rate(own.rate_limit if own else None),
        )
    return limits


def _rate(limit: RateLimit | None) -> Rate | None:
    return None if limit is None else Rate(limit=limit.limit, period_seconds=limit.seconds)


def default_backoff(attempt: int) -> float:
    """The default backoff with jitter: about `min(2**attempt * 10, 86_400)` seconds."""
    return jittered(default_backoff_seconds(attempt))


def _errors_of(error: ValidationError) -> str:
    """A validation error on one line, naming each field, never its value (a result may hold
    secrets)."""
    return "; ".join(
        f"{'.'.join(str(p) for p in item['loc']) or 'the value'}: {item['msg']}"
        for item in error.errors(include_input=False)
    )
