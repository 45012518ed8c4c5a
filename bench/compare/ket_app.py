"""The ket side's worker code: one module, one no-op async job (imported by the workspace that
the harness writes to a temporary folder, so `ket worker` runs it as a user's app would)."""

from __future__ import annotations

import os
import time
from typing import Any

from starts import StartLog

from ket import define_deployment, define_job, define_module
from ket.declare.deployment import DeploymentDecl

_starts = StartLog.from_environment()


def _minute_counts(kind: str) -> None:
    """KET_CMP_MINUTES (minutes_cost.py): `off` runs no minute count in the worker, `second`
    counts every second instead of every minute (a cost sixty times the default's, to see it at
    all); anything else leaves the worker as it is. Read where the worker imports this module."""
    if kind not in ("off", "second"):
        return
    import ket.runtime.worker as worker
    from ket.runtime.minutes import MinuteService

    class Counted(MinuteService):
        def __init__(self, store: Any, attempts: Any, **_: Any) -> None:
            super().__init__(store, attempts, interval=1.0)

        async def tick(self) -> None:
            if kind == "second":
                await self._store.minute_record(0.9)

    worker.MinuteService = Counted  # type: ignore[misc]


_minute_counts(os.environ.get("KET_CMP_MINUTES", ""))


async def noop(ctx: Any, input: Any) -> None:
    """Does nothing; in a latency pass it first records when it started."""
    if _starts is not None:
        _starts.record(ctx.job.id, time.time())


def deployment(concurrency: int | None) -> DeploymentDecl:
    """The bench deployment: ket's default worker settings, or one queue at `concurrency`.

    KET_CMP_LIMITS=declared declares fleet-wide limits that a drain never reaches (at most 10
    running per order, a million starts a second), to measure what keeping them costs;
    KET_CMP_LIMITS=concurrency the concurrency limit of those alone; KET_CMP_LIMITS=reached
    one that a drain does reach (at most 4 running at once)."""
    limits: dict[str, Any] = {
        "concurrency": {"concurrency_limit": {"limit": 10, "key": ["order_id"]}},
        "declared": {
            "concurrency_limit": {"limit": 10, "key": ["order_id"]},
            "rate_limit": {"limit": 1_000_000, "period": "1s"},
        },
        "reached": {"concurrency_limit": 4},
    }.get(os.environ.get("KET_CMP_LIMITS", ""), {})
    job = define_job(input=INPUT_SHAPE, idempotent=True, handler=noop, **limits)
    module = define_module(name="b", jobs={"noop": job})
    worker = None if concurrency is None else {"queues": {"default": concurrency}}
    return define_deployment(name="bench", modules=[module], worker=worker)


JOB = "b.noop"
# what a user's job carries: an order's id and an amount, validated by ket at every enqueue
# (PgQueuer gets the same input as JSON bytes, which is what its users send)
INPUT_SHAPE = {"order_id": "string", "amount": "int"}


def order(n: int) -> dict[str, object]:
    """The input of job number `n`."""
    return {"order_id": f"ord-{n:08d}", "amount": n % 10_000}
