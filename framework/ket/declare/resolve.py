"""Turn declarations as written into the typed values checks, the manifest and the runtime use.

Each function raises the specific KetError for a bad value; `ket check` turns those into findings
and everything else runs only on declarations that passed it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from ket.declare.deployment import DeploymentDecl
from ket.declare.effect import Effect, parse_effect
from ket.declare.flow import (
    ConcurrencyLimit,
    Debounce,
    RateLimit,
    UniqueWindow,
    check_key,
    parse_concurrency_limit,
    parse_debounce,
    parse_expires_in,
    parse_rate_limit,
    parse_unique,
)
from ket.declare.input import build_input_model
from ket.declare.job import JobDecl
from ket.declare.operation import OperationDecl
from ket.declare.serve import ServeConfig
from ket.declare.worker import QUEUE_LIMIT_ERROR, WorkerConfig
from ket.errors import DeclarationError, InputSpecError
from ket.limits import MAX_TAG_LENGTH, MAX_TAGS
from ket.schedule import Schedule, parse_schedule

TIMEZONE_VARIABLE = "KET_TIMEZONE"


def default_timezone(environ: Mapping[str, str] | None = None) -> str | None:
    """The zone of wall-clock schedules that name none: `KET_TIMEZONE`, never the server's zone."""
    value = (os.environ if environ is None else environ).get(TIMEZONE_VARIABLE, "").strip()
    return value or None


def input_model(operation: OperationDecl) -> type[BaseModel]:
    """The pydantic model the operation's input is validated with."""
    return build_input_model(operation.input, operation.title)


def output_model(job: JobDecl) -> type[BaseModel] | None:
    """The pydantic model a job's returned value is validated with; None when it declares no
    output (its returned value is not kept)."""
    if job.output is None:
        return None
    try:
        return build_input_model(job.output, f"{job.title}.output")
    except InputSpecError as error:  # the shorthand's messages name an input field
        message = error.message
        if message.startswith("input"):
            message = "output" + message[5:]
        raise InputSpecError(message) from None


def effects(operation: OperationDecl) -> tuple[Effect, ...]:
    """The operation's effects, parsed, in declaration order."""
    return tuple(parse_effect(text) for text in operation.effects)


def schedule(job: JobDecl, timezone: str | None) -> Schedule | None:
    """The job's schedule, parsed with `timezone` as the default zone; None if it has none."""
    if job.schedule is None:
        return None
    # parse_schedule names a value that is not a mapping at all, so pass it on as written
    return parse_schedule(job.schedule, default_timezone=timezone)  # type: ignore[arg-type]


def expires_in(job: JobDecl) -> float | None:
    """How many seconds after its run time a job not yet started is discarded (reason
    `expired`); None when it never expires."""
    return None if job.expires_in is None else parse_expires_in(job.expires_in)


def concurrency_limit(job: JobDecl) -> ConcurrencyLimit | None:
    """The job's fleet-wide limit on attempts running at once, its key fields checked against
    its input; None without one."""
    if job.concurrency_limit is None:
        return None
    limit = parse_concurrency_limit(job.concurrency_limit)
    check_key("concurrency_limit", limit.key, input_model(job), job.input)
    return limit


def rate_limit(job: JobDecl) -> RateLimit | None:
    """The job's fleet-wide limit on attempts started per period, its key fields checked
    against its input; None without one."""
    if job.rate_limit is None:
        return None
    limit = parse_rate_limit(job.rate_limit)
    check_key("rate_limit", limit.key, input_model(job), job.input)
    return limit


def unique(job: JobDecl) -> UniqueWindow | None:
    """The job's uniqueness window, its key fields checked against its input; None without."""
    if job.unique is None:
        return None
    window = parse_unique(job.unique)
    check_key("unique", window.key, input_model(job), job.input)
    return window


def debounce(job: JobDecl) -> Debounce | None:
    """The job's debounce, its key fields checked against its input; None without."""
    if job.debounce is None:
        return None
    found = parse_debounce(job.debounce)
    check_key("debounce", found.key, input_model(job), job.input)
    return found


def worker_config(deployment: DeploymentDecl) -> WorkerConfig:
    """The deployment's worker configuration with defaults (its queues' limits in `limits`), or
    DeclarationError naming every problem."""
    try:
        return WorkerConfig.model_validate(dict(deployment.worker))
    except ValidationError as error:
        problems = _worker_problems_of(error)
        limits = [f"queues.{p.queue}: {p.message}" for p in problems.queue_limits]
        raise DeclarationError("; ".join([*problems.general, *limits])) from None


@dataclass(frozen=True, kw_only=True)
class QueueLimitProblem:
    """A queue's limits that do not parse: the queue, what is wrong, and its entry as written."""

    queue: str
    message: str
    entry: object


@dataclass(frozen=True, kw_only=True)
class WorkerProblems:
    """What is wrong with a worker configuration: its queues' limits apart from the rest."""

    general: tuple[str, ...] = ()
    queue_limits: tuple[QueueLimitProblem, ...] = ()


def worker_problems(deployment: DeploymentDecl) -> WorkerProblems:
    """Every problem of the deployment's worker configuration; none when it is valid."""
    try:
        WorkerConfig.model_validate(dict(deployment.worker))
    except ValidationError as error:
        return _worker_problems_of(error)
    return WorkerProblems()


def _worker_problems_of(error: ValidationError) -> WorkerProblems:
    """A worker configuration's validation error split: the queues' limits, and the rest."""
    limits = [item for item in error.errors() if item["type"] == QUEUE_LIMIT_ERROR]
    rest = [item for item in error.errors() if item["type"] != QUEUE_LIMIT_ERROR]
    return WorkerProblems(
        general=tuple(_problem(item, "worker", plain=False) for item in rest),
        queue_limits=tuple(
            QueueLimitProblem(queue=str(item["loc"][-1]), message=item["msg"], entry=item["input"])
            for item in limits
        ),
    )


def serve_config(deployment: DeploymentDecl) -> ServeConfig:
    """The deployment's `serve` configuration with defaults, or DeclarationError naming the
    value."""
    try:
        return ServeConfig.model_validate(dict(deployment.serve))
    except ValidationError as error:
        raise DeclarationError(_problems(error, "serve")) from None


def _problems(error: ValidationError, whole: str, *, plain: bool = True) -> str:
    """pydantic's errors as `field: message, got value`; `plain` drops the "Value error, " of
    ket's own validators, whose message names the value already (the worker's keep theirs)."""
    return "; ".join(_problem(item, whole, plain=plain) for item in error.errors())


def _problem(item: ErrorDetails, whole: str, *, plain: bool) -> str:
    where = ".".join(str(p) for p in item["loc"])
    message, own = item["msg"], item["type"] == "value_error"
    if plain and own:
        message = message.removeprefix("Value error, ")
    value = f", got {item['input']!r}" if where and not (plain and own) else ""
    return f"{where or whole}: {message}{value}"


def tags(value: object) -> tuple[str, ...]:
    """Tags as a job carries them: each stripped, repeats dropped, in their order.

    DeclarationError, naming the value, unless `value` is a list (or tuple) of at most MAX_TAGS
    distinct strings of 1 to MAX_TAG_LENGTH characters without NUL.
    """
    if not isinstance(value, list | tuple):
        raise DeclarationError(f"tags must be a list of strings, got {value!r}")
    cleaned: dict[str, None] = {}
    for tag in value:
        if not isinstance(tag, str):
            raise DeclarationError(f"a tag must be a string, got {tag!r}")
        text = tag.strip()
        if not text or len(text) > MAX_TAG_LENGTH or "\x00" in text:
            raise DeclarationError(
                f"a tag must be 1 to {MAX_TAG_LENGTH} characters without NUL, got {tag!r}"
            )
        cleaned[text] = None
    if len(cleaned) > MAX_TAGS:
        raise DeclarationError(f"a job carries at most {MAX_TAGS} tags, got {len(cleaned)}")
    return tuple(cleaned)


def handler_name(operation: OperationDecl) -> str:
    """`module:qualname` of the handler: stable across machines, unlike a file path."""
    return callable_name(operation.handler)


def callable_name(fn: object) -> str:
    """`module:qualname` of a function (of its class, for another callable)."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{name}"
