"""Compile a deployment's declarations into its manifest."""

from __future__ import annotations

from ket.check import error_messages, run_checks
from ket.declare import resolve
from ket.declare.deployment import DeploymentDecl
from ket.declare.flow import ConcurrencyLimit, Debounce, QueueLimits, RateLimit, UniqueWindow
from ket.declare.function import FunctionDecl
from ket.declare.job import JobDecl
from ket.declare.model import ModelDecl
from ket.declare.module import ModuleDecl
from ket.errors import CheckFailed
from ket.manifest.model import (
    ConcurrencyLimitEntry,
    DebounceEntry,
    FunctionEntry,
    JobEntry,
    Manifest,
    ModelEntry,
    ModuleEntry,
    QueueLimitsEntry,
    RateLimitEntry,
    ScheduleEntry,
    ServeEntry,
    UniqueEntry,
    WorkerEntry,
)


def compile_manifest(deployment: DeploymentDecl, *, timezone: str | None = None) -> Manifest:
    """The manifest of a deployment; CheckFailed if `ket check` finds errors in it.

    `timezone` is the default zone of wall-clock schedules (default: `KET_TIMEZONE`).
    """
    timezone = timezone or resolve.default_timezone()
    errors = error_messages(run_checks(deployment, timezone=timezone))
    if errors:
        raise CheckFailed(errors)
    return Manifest(
        format=1,
        deployment=deployment.name,
        modules={m.name: _module(m, timezone) for m in deployment.modules},
        worker=_worker(deployment),
        serve=_serve(deployment) if deployment.serve else None,
    )


def _worker(deployment: DeploymentDecl) -> WorkerEntry:
    config = resolve.worker_config(deployment)
    limits = {name: _queue_limits(found) for name, found in config.limits.items()}
    return WorkerEntry(
        **config.model_dump(exclude={"limits"}),
        limits={name: entry for name, entry in limits.items() if entry != QueueLimitsEntry()},
    )


def _queue_limits(limits: QueueLimits) -> QueueLimitsEntry:
    return QueueLimitsEntry(
        concurrency_limit=_concurrency_limit(limits.concurrency_limit),
        rate_limit=_rate_limit(limits.rate_limit),
    )


def _concurrency_limit(limit: ConcurrencyLimit | None) -> ConcurrencyLimitEntry | None:
    if limit is None:
        return None
    return ConcurrencyLimitEntry(limit=limit.limit, key=list(limit.key))


def _rate_limit(limit: RateLimit | None) -> RateLimitEntry | None:
    if limit is None:
        return None
    return RateLimitEntry(limit=limit.limit, period=limit.period, key=list(limit.key))


def _unique(window: UniqueWindow | None) -> UniqueEntry | None:
    if window is None:
        return None
    # the effective states, default or not: a change of the default shows in the manifest
    return UniqueEntry(period=window.period, key=list(window.key), states=list(window.states))


def _debounce(debounce: Debounce | None) -> DebounceEntry | None:
    if debounce is None:
        return None
    return DebounceEntry(period=debounce.period, key=list(debounce.key), max_wait=debounce.max_wait)


def _serve(deployment: DeploymentDecl) -> ServeEntry:
    config = resolve.serve_config(deployment)
    authenticate = config.authenticate
    return ServeEntry(
        authenticate=None if authenticate is None else resolve.callable_name(authenticate),
        max_body_bytes=config.max_body_bytes,
        tenant_host=config.tenant_host,
        shutdown_grace_ms=config.shutdown_grace_ms,
        security_scheme=config.security_scheme,
        dashboard=config.dashboard,
    )


def _module(module: ModuleDecl, timezone: str | None) -> ModuleEntry:
    return ModuleEntry(
        models={name: _model(model) for name, model in module.models.items()},
        functions={name: _function(fn) for name, fn in module.functions.items()},
        jobs={name: _job(job, timezone) for name, job in module.jobs.items()},
    )


def _model(model: ModelDecl) -> ModelEntry:
    return ModelEntry(fields={str(k): str(v) for k, v in model.fields.items()})


def _function(fn: FunctionDecl) -> FunctionEntry:
    return FunctionEntry(
        handler=resolve.handler_name(fn),
        input=resolve.input_model(fn).model_json_schema(),
        effects=sorted({e.text for e in resolve.effects(fn)}),
        cross_company=bool(fn.cross_company),
    )


def _job(job: JobDecl, timezone: str | None) -> JobEntry:
    schedule = resolve.schedule(job, timezone)
    return JobEntry(
        handler=resolve.handler_name(job),
        input=resolve.input_model(job).model_json_schema(),
        effects=sorted({e.text for e in resolve.effects(job)}),
        cross_company=bool(job.cross_company),
        queue=str(job.queue),
        idempotent=bool(job.idempotent),
        max_attempts=int(job.max_attempts),  # type: ignore[call-overload]
        timeout_ms=int(job.timeout_ms),  # type: ignore[call-overload]
        priority=int(job.priority),  # type: ignore[call-overload]
        backoff="custom" if job.backoff is not None else "default",
        schedule=ScheduleEntry.model_validate(schedule.to_manifest()) if schedule else None,
        input_version=int(job.input_version),  # type: ignore[call-overload]
        upgrades_from=sorted(job.upgrade or {}),  # type: ignore[call-overload]
        tags=list(resolve.tags(job.tags)),
        expires_in=None if job.expires_in is None else str(job.expires_in),
        concurrency_limit=_concurrency_limit(resolve.concurrency_limit(job)),
        rate_limit=_rate_limit(resolve.rate_limit(job)),
        unique=_unique(resolve.unique(job)),
        debounce=_debounce(resolve.debounce(job)),
        output=None
        if (output := resolve.output_model(job)) is None
        else output.model_json_schema(),
    )
