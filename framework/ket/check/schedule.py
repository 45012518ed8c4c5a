"""Schedules: parse, fire often enough but not too often, in a named zone, without input."""

from __future__ import annotations

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.errors import InputSpecError, ScheduleError

PROBLEM_CODES = {
    "syntax": "KET201",
    "too_frequent": "KET202",
    "bad_time": "KET203",
    "unknown_timezone": "KET204",
    "no_timezone": "KET205",
    "never_fires": "KET207",
}


@register("schedules")
def check_schedules(context: CheckContext) -> list[CheckMessage]:
    found: list[CheckMessage] = []
    for job in context.deployment.jobs():
        if job.schedule is None:
            continue
        where = Subject(obj=f"job {job.title}", source=job.source)
        try:
            resolve.schedule(job, context.timezone)
        except ScheduleError as error:
            found.append(finding(PROBLEM_CODES[error.problem], error.message, where))
        try:
            required = sorted(
                name
                for name, info in resolve.input_model(job).model_fields.items()
                if info.is_required()
            )
        except InputSpecError:
            continue  # reported by KET501
        if required:
            found.append(
                finding(
                    "KET206",
                    f"scheduled job requires input field(s) {', '.join(required)}",
                    where,
                )
            )
    return found
