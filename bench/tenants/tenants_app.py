"""The workers' side of bench/tenants_bench.py: the deployment every `ket worker` runs.

A probe job records when its handler started: one line `<tenant> <job id> <time.time()>`
appended to the file named by `KETBENCH_STARTS` (each worker process is given a file of its
own, so no two processes write to one file). Backlog jobs and schedule ticks record nothing:
the harness reads ticks from each tenant's `ket_jobs` afterwards.
"""

from __future__ import annotations

import os
import time
from typing import Any, TextIO

from ket import define_deployment, define_job, define_module
from ket.declare.deployment import DeploymentDecl

STARTS_ENV = "KETBENCH_STARTS"
PROBE = "b.probe"
BACKLOG = "b.backlog"
# schedule job -> its interval in seconds (what the harness expects between ticks)
SCHEDULES = {"b.every_minute": 60, "b.every_30s": 30}


def _start_file() -> TextIO | None:
    path = os.environ.get(STARTS_ENV)
    return None if not path else open(path, "a", encoding="ascii", buffering=1)


_starts = _start_file()


async def probe(ctx: Any, input: Any) -> None:
    """Records when it started (first thing), then does nothing."""
    started = time.time()
    if _starts is not None:
        _starts.write(f"{ctx.tenant} {ctx.job.id} {started!r}\n")


async def noop(ctx: Any, input: Any) -> None:
    """The backlog's and the schedules' job: nothing."""


def deployment() -> DeploymentDecl:
    """ket's default worker settings; one queue; two schedules per tenant."""
    module = define_module(
        name="b",
        jobs={
            "probe": define_job(idempotent=True, handler=probe),
            "backlog": define_job(idempotent=True, handler=noop),
            "every_minute": define_job(idempotent=True, schedule={"every": "1m"}, handler=noop),
            "every_30s": define_job(idempotent=True, schedule={"every": "30s"}, handler=noop),
        },
    )
    return define_deployment(name="ketbench", modules=[module])


bench = deployment()
