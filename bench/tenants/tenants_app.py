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
# "quiet": schedules that tick hourly and daily, so that an idle worker's cost is measured
# without the busy schedules' 50 tick jobs a second at 1,000 tenants (the harness's
# --quiet-schedules sets it for itself and the workers)
SCHEDULES_ENV = "KETBENCH_SCHEDULES"
_BUSY = {"b.every_minute": ({"every": "1m"}, 60), "b.every_30s": ({"every": "30s"}, 30)}
_QUIET = {
    "b.every_hour": ({"every": "1h"}, 3_600),
    "b.nightly": ({"daily_at": "03:00", "timezone": "UTC"}, 86_400),
}


def _chosen() -> dict[str, tuple[dict[str, str], int]]:
    return _QUIET if os.environ.get(SCHEDULES_ENV) == "quiet" else _BUSY


def schedules() -> dict[str, int]:
    """Schedule job -> its interval in seconds (what the harness expects between ticks)."""
    return {name: interval for name, (_, interval) in _chosen().items()}


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
    jobs = {
        "probe": define_job(idempotent=True, handler=probe),
        "backlog": define_job(idempotent=True, handler=noop),
    }
    for name, (schedule, _) in _chosen().items():
        jobs[name.removeprefix("b.")] = define_job(idempotent=True, schedule=schedule, handler=noop)
    module = define_module(name="b", jobs=jobs)
    return define_deployment(name="ketbench", modules=[module])


bench = deployment()
