"""Flow control: expiry, concurrency and rate limits of jobs, and the limits of the worker's
queues; each parses, and a limit's key is made of scalar fields of the job's input."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from ket.check.code import PAUSE_HINT, Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.declare.deployment import DeploymentDecl
from ket.declare.flow import (
    Option,
    declared_limit,
    key_problems,
    parse_concurrency_limit,
    parse_expires_in,
    parse_rate_limit,
)
from ket.declare.job import JobDecl
from ket.errors import DeclarationError, InputSpecError

CODES: dict[Option, str] = {"concurrency_limit": "KET702", "rate_limit": "KET703"}


@register("flow")
def check_flow(context: CheckContext) -> list[CheckMessage]:
    deployment = context.deployment
    found = _queues(deployment)
    poll_max_ms = _poll_max_ms(deployment)
    for job in deployment.jobs():
        where = Subject(obj=f"job {job.title}", source=job.source)
        found += _expiry(job, poll_max_ms, where)
        for option in CODES:
            found += _limit(job, option, where)
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


def _limit(job: JobDecl, option: Option, where: Subject) -> list[CheckMessage]:
    written = getattr(job, option)
    if written is None:
        return []
    parse = parse_concurrency_limit if option == "concurrency_limit" else parse_rate_limit
    try:
        key = parse(written).key
    except DeclarationError as error:
        hint = PAUSE_HINT if _zero(declared_limit(written)) else None
        return [finding(CODES[option], error.message, where, hint=hint)]
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


def _queues(deployment: DeploymentDecl) -> list[CheckMessage]:
    where = Subject(obj=f"deployment {deployment.name}", source=deployment.source)
    found: list[CheckMessage] = []
    for problem in resolve.worker_problems(deployment).queue_limits:
        entry = problem.entry
        zero = isinstance(entry, Mapping) and any(
            _zero(declared_limit(entry.get(option))) for option in CODES
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


def _zero(limit: object) -> bool:
    return type(limit) is int and limit == 0
