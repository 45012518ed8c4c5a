"""The worker: a valid configuration, and every queue a job uses configured on it."""

from __future__ import annotations

import re

from ket.check.code import Subject, finding
from ket.check.message import CheckMessage
from ket.check.registry import CheckContext, register
from ket.declare import resolve
from ket.errors import DeclarationError

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


@register("worker")
def check_worker(context: CheckContext) -> list[CheckMessage]:
    deployment = context.deployment
    where = Subject(obj=f"deployment {deployment.name}", source=deployment.source)
    problems = resolve.worker_problems(deployment)
    if problems.general:
        return [finding("KET402", "; ".join(problems.general), where)]
    try:
        queues = set(resolve.worker_config(deployment).queues)
    except DeclarationError:
        return []  # only its queues' limits are wrong: KET706, from the flow checks
    found = [
        finding("KET403", f"queue name {name!r} is not valid", where)
        for name in sorted(queues)
        if not QUEUE_NAME.fullmatch(name)
    ]
    for job in deployment.jobs():
        job_where = Subject(obj=f"job {job.title}", source=job.source)
        if not isinstance(job.queue, str) or not QUEUE_NAME.fullmatch(job.queue):
            found.append(finding("KET403", f"queue name {job.queue!r} is not valid", job_where))
        elif job.queue not in queues:
            configured = ", ".join(sorted(queues))
            found.append(
                finding(
                    "KET401",
                    f"queue {job.queue!r} is not configured on deployment "
                    f"{deployment.name!r} (configured: {configured})",
                    job_where,
                )
            )
    return found
