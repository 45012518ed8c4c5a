"""The catalog: a checked deployment resolved for running, and the one place jobs are built.

Producers (the handler context, the client, the test helpers) and the worker all look jobs up
here, so a job is validated, defaulted and turned into a `NewJob` the same way wherever it is
enqueued from.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ket.check import error_messages, run_checks
from ket.declare import resolve
from ket.declare.deployment import DeploymentDecl
from ket.declare.effect import Effect
from ket.declare.job import JobDecl, default_backoff_seconds
from ket.declare.operation import Handler, OperationDecl
from ket.declare.worker import WorkerConfig
from ket.errors import CheckFailed, JobRejected
from ket.schedule import Schedule
from ket.store.types import ModelTable, NewJob

Backoff = Callable[[int], float]


@dataclass(frozen=True, kw_only=True)
class OperationSpec:
    """A function or job ready to run: its handler, validated input model and effects."""

    name: str
    handler: Handler
    input_model: type[BaseModel]
    effects: frozenset[Effect]
    cross_company: bool

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


@dataclass(frozen=True, kw_only=True)
class Catalog:
    """The deployment's jobs and functions by qualified name, and its worker configuration."""

    deployment: str
    jobs: Mapping[str, JobSpec]
    functions: Mapping[str, OperationSpec]
    models: Mapping[str, ModelTable]
    worker: WorkerConfig

    @classmethod
    def build(cls, deployment: DeploymentDecl, *, timezone: str | None = None) -> Catalog:
        """Resolve a deployment; CheckFailed if `ket check` finds errors in it."""
        timezone = timezone or resolve.default_timezone()
        errors = error_messages(run_checks(deployment, timezone=timezone))
        if errors:
            raise CheckFailed(errors)
        return cls(
            deployment=deployment.name,
            jobs={job.qualified_name: _job(job, timezone) for job in deployment.jobs()},
            functions={fn.qualified_name: _operation(fn) for fn in deployment.functions()},
            models={
                model.qualified_name: ModelTable(
                    name=model.qualified_name, fields={k: str(v) for k, v in model.fields.items()}
                )
                for model in deployment.models()
            },
            worker=resolve.worker_config(deployment),
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
        *,
        run_at: datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tick: datetime | None = None,
        ticks_skipped: int | None = None,
    ) -> NewJob:
        """A job to insert: input validated (pydantic ValidationError naming the field), defaults
        from the declaration filled in."""
        spec = self.job(name)
        payload = validate_input(spec, input)
        if run_at is not None and (not isinstance(run_at, datetime) or run_at.utcoffset() is None):
            raise JobRejected(
                f"job {name!r}: run_at must be a timezone-aware datetime, got {run_at!r}"
            )
        return NewJob(
            name=name,
            queue=spec.queue,
            payload=payload.model_dump(mode="json"),
            run_at=run_at,
            priority=spec.priority if priority is None else priority,
            max_attempts=spec.max_attempts,
            unique_key=unique_key,
            company=company,
            tick=tick,
            ticks_skipped=ticks_skipped,
        )


def validate_input(spec: OperationSpec, input: BaseModel | Mapping[str, Any] | None) -> BaseModel:
    """The operation's input model instance for `input` (a mapping, a model, or nothing)."""
    if isinstance(input, spec.input_model):
        return input
    if isinstance(input, BaseModel):
        input = input.model_dump()
    return spec.input_model.model_validate(dict(input or {}))


def jittered(seconds: float) -> float:
    """`seconds` give or take 10%, so failures of many jobs do not retry in lockstep."""
    return max(0.0, seconds * random.uniform(0.9, 1.1))


def _operation(decl: OperationDecl) -> OperationSpec:
    return OperationSpec(
        name=decl.qualified_name,
        handler=decl.handler,
        input_model=resolve.input_model(decl),
        effects=frozenset(resolve.effects(decl)),
        cross_company=bool(decl.cross_company),
    )


def _job(decl: JobDecl, timezone: str | None) -> JobSpec:
    custom = decl.backoff
    backoff: Backoff = custom if callable(custom) else default_backoff
    return JobSpec(
        name=decl.qualified_name,
        handler=decl.handler,
        input_model=resolve.input_model(decl),
        effects=frozenset(resolve.effects(decl)),
        cross_company=bool(decl.cross_company),
        queue=str(decl.queue),
        priority=int(decl.priority),  # type: ignore[call-overload]
        max_attempts=int(decl.max_attempts),  # type: ignore[call-overload]
        timeout_seconds=int(decl.timeout_ms) / 1000,  # type: ignore[call-overload]
        backoff=backoff,
        schedule=resolve.schedule(decl, timezone),
    )


def default_backoff(attempt: int) -> float:
    """The default backoff with jitter: about `min(2**attempt * 10, 86_400)` seconds."""
    return jittered(default_backoff_seconds(attempt))
