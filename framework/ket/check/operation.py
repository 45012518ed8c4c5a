"""Options of functions and jobs: idempotency, attempts, timeout, priority, handler, input."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.declare.job import JobDecl
from ket.declare.operation import OperationDecl
from ket.errors import DeclarationError, InputSpecError


@register("operations")
def check_operations(context: CheckContext) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    for operation in [*context.deployment.functions(), *context.deployment.jobs()]:
        found.extend(_common(operation))
        if isinstance(operation, JobDecl):
            found.extend(_job_options(operation))
    return found


def _subject(operation: OperationDecl) -> str:
    kind = "job" if isinstance(operation, JobDecl) else "function"
    return f"{kind} {operation.title}"


def _common(operation: OperationDecl) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    where = Subject(obj=_subject(operation), source=operation.source)
    handler = operation.handler
    if not callable(handler):
        found.append(finding("KET105", f"handler {handler!r} is not callable", where))
    elif not accepts(handler, 2):
        found.append(
            finding(
                "KET106",
                f"handler {resolve.handler_name(operation)}{signature_text(handler)} "
                "cannot be called with (ctx, input)",
                where,
            )
        )
    if not isinstance(operation.cross_company, bool):
        found.append(
            finding(
                "KET108",
                f"cross_company must be True or False, got {operation.cross_company!r}",
                where,
            )
        )
    try:
        resolve.input_model(operation)
    except InputSpecError as error:
        found.append(finding("KET501", error.message, where))
    return found


def _job_options(job: JobDecl) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    where = Subject(obj=_subject(job), source=job.source)
    try:
        resolve.output_model(job)
    except InputSpecError as error:
        found.append(finding("KET503", error.message, where))
    if job.idempotent is not True:
        if isinstance(job.idempotent, bool):
            found.append(
                finding(
                    "KET101", "job is not declared idempotent; delivery is at least once", where
                )
            )
        else:
            found.append(
                finding(
                    "KET108", f"idempotent must be True or False, got {job.idempotent!r}", where
                )
            )
    if not _is_int(job.max_attempts) or job.max_attempts < 1:  # type: ignore[operator]
        found.append(
            finding(
                "KET102",
                f"max_attempts must be a positive integer, got {job.max_attempts!r}",
                where,
            )
        )
    if not _is_int(job.timeout_ms) or job.timeout_ms <= 0:  # type: ignore[operator]
        found.append(
            finding(
                "KET103", f"timeout_ms must be a positive integer, got {job.timeout_ms!r}", where
            )
        )
    if not _is_int(job.priority):
        found.append(finding("KET104", f"priority must be an integer, got {job.priority!r}", where))
    if job.backoff is not None and not (callable(job.backoff) and accepts(job.backoff, 1)):
        found.append(
            finding(
                "KET107",
                f"backoff {_describe(job.backoff)} cannot be called as backoff(attempt)",
                where,
            )
        )
    version = job.input_version
    if not _is_int(version) or not 1 <= version <= MAX_INPUT_VERSION:  # type: ignore[operator]
        found.append(
            finding(
                "KET109",
                f"input_version must be an integer from 1 to {MAX_INPUT_VERSION}, got {version!r}",
                where,
            )
        )
    elif job.upgrade is not None:
        found.extend(finding("KET110", problem, where) for problem in _upgrade(job, version))  # type: ignore[arg-type]
    try:
        resolve.tags(job.tags)
    except DeclarationError as error:
        found.append(finding("KET111", str(error), where))
    return found


# The stored column is a 32-bit integer.
MAX_INPUT_VERSION = 2**31 - 1


def _upgrade(job: JobDecl, version: int) -> list[str]:
    """What keeps `upgrade` from bringing stored payloads up to `version`, one line each."""
    upgrade = job.upgrade
    if not isinstance(upgrade, Mapping):
        return [f"upgrade must be a dict of input version to function, got {upgrade!r}"]
    problems: list[str] = []
    steps: list[int] = []
    for old, step in upgrade.items():
        if not _is_int(old) or not 1 <= old < version:
            problems.append(
                f"upgrade key {old!r} is not an input version below input_version {version}"
            )
            continue
        steps.append(old)
        if not (callable(step) and accepts(step, 1)):
            problems.append(
                f"upgrade from version {old}: {_describe(step)} cannot be called as fn(payload)"
            )
    if steps and not problems:
        missing = sorted(set(range(min(steps), version)) - set(steps))
        if missing:
            listed = ", ".join(str(v) for v in missing)
            problems.append(
                f"upgrade has no step from version {listed}: payloads of version "
                f"{min(steps)} cannot reach input_version {version}"
            )
    return problems


def _describe(value: object) -> str:
    """A callable by its qualified name (a repr would carry a memory address), else its repr."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '?')}:{value.__qualname__}{signature_text(value)}"
    return repr(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def accepts(fn: Callable[..., object], count: int) -> bool:
    """Whether `fn` can be called with `count` positional arguments (unknowable: assume yes)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def signature_text(fn: Callable[..., object]) -> str:
    """`fn`'s signature as text, `(ctx, input)`; empty when it cannot be read."""
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return ""
