"""Flow control: expiry, concurrency and rate limits, uniqueness windows and debounces of jobs,
and the limits of the worker's queues; each parses, the key of a limit, window or debounce is
made of scalar fields of the job's input, a job has a window or a debounce but not both, and a
window does not outlive the finished jobs it counts."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from ket.check.code import PAUSE_HINT, Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.declare.deployment import DeploymentDecl
from ket.declare.flow import (
    ConcurrencyLimit,
    Debounce,
    Option,
    RateLimit,
    UniqueWindow,
    declared_limit,
    key_problems,
    parse_concurrency_limit,
    parse_debounce,
    parse_expires_in,
    parse_rate_limit,
    parse_unique,
)
from ket.declare.job import JobDecl
from ket.declare.worker import Finished
from ket.errors import DeclarationError, InputSpecError

CODES: dict[Option, str] = {
    "concurrency_limit": "KET702",
    "rate_limit": "KET703",
    "unique": "KET708",
    "debounce": "KET709",
}
PARSERS: dict[
    Option, Callable[[object], ConcurrencyLimit | RateLimit | UniqueWindow | Debounce]
] = {
    "concurrency_limit": parse_concurrency_limit,
    "rate_limit": parse_rate_limit,
    "unique": parse_unique,
    "debounce": parse_debounce,
}
# The options with a limit, which a 0 would turn into a pause (on a job or a queue).
LIMITS: tuple[Option, ...] = ("concurrency_limit", "rate_limit")
# The states whose jobs the worker's pruner deletes after their retention.
FINISHED: tuple[Finished, ...] = ("completed", "discarded", "cancelled")


@register("flow")
def check_flow(context: CheckContext) -> list[CheckMessage]:
    deployment = context.deployment
    found = _queues(deployment)
    poll_max_ms = _poll_max_ms(deployment)
    retention_ms = _retention_ms(deployment)
    for job in deployment.jobs():
        where = Subject(obj=f"job {job.title}", source=job.source)
        found += _expiry(job, poll_max_ms, where)
        for option in CODES:
            found += _keyed(job, option, where)
        found += _unique_and_debounce(job, where)
        found += _retention(job, retention_ms, where)
    return found


def _expiry(job: JobDecl, poll_max_ms: int | None, where: Subject) -> list[CheckMessage]:
    if job.expires_in is None:
        return []
    try:
        seconds = parse_expires_in(job.expires_in)
    except DeclarationError as error:
        return [finding("KET701", error.message, where)]
    if poll_max_ms is not None and seconds * 1000 <= poll_max_ms:
        message = (
            f"expires_in {job.expires_in!r} is within the worker's poll_max_ms ({poll_max_ms} "
            "ms): a job whose wake-up is lost may expire before a poll sees it"
        )
        return [finding("KET707", message, where)]
    return []


def _keyed(job: JobDecl, option: Option, where: Subject) -> list[CheckMessage]:
    """A limit, window or debounce that does not parse, or each of its key fields that cannot
    be part of a key."""
    written = getattr(job, option)
    if written is None:
        return []
    try:
        key = PARSERS[option](written).key
    except DeclarationError as error:
        zero = option in LIMITS and _zero(declared_limit(written))
        return [finding(CODES[option], error.message, where, hint=PAUSE_HINT if zero else None)]
    try:
        model = resolve.input_model(job)
    except InputSpecError:
        return []  # reported by KET501
    found: list[CheckMessage] = []
    for problem in key_problems(option, key, model, job.input):
        if problem.missing:
            close = difflib.get_close_matches(problem.field, list(model.model_fields), n=1)
            hint = (
                f"Write {close[0]!r}, the input field closest to {problem.field!r}, or add "
                f"{problem.field!r} to the job's input."
                if close
                else None
            )
            found.append(finding("KET704", problem.message, where, hint=hint))
        else:
            found.append(finding("KET705", problem.message, where))
    return found


def _unique_and_debounce(job: JobDecl, where: Subject) -> list[CheckMessage]:
    """Both on one job: a debounced job already has at most one pending job per key."""
    if job.unique is None or job.debounce is None:
        return []
    message = (
        f"unique {job.unique!r} and debounce {job.debounce!r} are both declared: a debounced "
        "job already has at most one pending job per key"
    )
    return [finding("KET710", message, where)]


def _retention(
    job: JobDecl, retention_ms: Mapping[Finished, int | None] | None, where: Subject
) -> list[CheckMessage]:
    """A window longer than the retention of a finished state it counts: the pruner deletes
    such jobs before the window ends, and a deleted job holds no key."""
    if job.unique is None or retention_ms is None:
        return []
    try:
        window = parse_unique(job.unique)
    except DeclarationError:
        return []  # reported by KET708
    found: list[CheckMessage] = []
    for state in FINISHED:
        kept = retention_ms.get(state)
        if state in window.states and kept is not None and window.seconds * 1000 > kept:
            message = (
                f"unique period {window.period!r} is longer than the worker's retention_ms for "
                f"{state} jobs ({kept} ms): the pruner deletes them before the window ends, and "
                "a pruned job no longer holds its key"
            )
            found.append(finding("KET711", message, where))
    return found


def _queues(deployment: DeploymentDecl) -> list[CheckMessage]:
    where = Subject(obj=f"deployment {deployment.name}", source=deployment.source)
    found: list[CheckMessage] = []
    for problem in resolve.worker_problems(deployment).queue_limits:
        entry = problem.entry
        zero = isinstance(entry, Mapping) and any(
            _zero(declared_limit(entry.get(option))) for option in LIMITS
        )
        message = f"queue {problem.queue!r}: {problem.message}"
        found.append(finding("KET706", message, where, hint=PAUSE_HINT if zero else None))
    return found


def _poll_max_ms(deployment: DeploymentDecl) -> int | None:
    """The worker's poll_max_ms; None while its configuration is invalid (KET402, KET706)."""
    try:
        return resolve.worker_config(deployment).poll_max_ms
    except DeclarationError:
        return None


def _retention_ms(deployment: DeploymentDecl) -> Mapping[Finished, int | None] | None:
    """The worker's retention_ms by finished state (None: kept for ever); None while its
    configuration is invalid (KET402, KET706)."""
    try:
        return resolve.worker_config(deployment).retention_ms
    except DeclarationError:
        return None


def _zero(limit: object) -> bool:
    return type(limit) is int and limit == 0
