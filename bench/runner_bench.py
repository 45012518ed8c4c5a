"""Runner benchmark: the worker's per-job Python CPU, in process, without a database.

Not a test. It claims --jobs no-op jobs from the memory store beforehand, then times only the
per-job step a worker runs for each of them: `TenantWorker._launch` and `_run` (the attempt's
bookkeeping), `JobRunner.run` (input, context, signal, timeout, handler, outcome), up to the
result handed to the settler. Jobs are launched --concurrency at a time and the next batch starts
when the last one has freed its slots, as the queue loop does. It prints the CPU time per job
(`time.process_time()`, all threads of the process) of each run and the median of --runs runs.

    flock /tmp/ket-bench.lock python3 bench/runner_bench.py              # async no-op, 5 runs
    flock /tmp/ket-bench.lock python3 bench/runner_bench.py --handler plain --jobs 5000
    flock /tmp/ket-bench.lock python3 bench/runner_bench.py --handler input
    pyinstrument bench/runner_bench.py --runs 1                          # where the time goes

Handlers: `async` (an `async def` no-op with no input, the drain benchmarks' job), `input` (the
same with a two-field input, so the payload is validated), `plain` (a `def` no-op, run in a
thread). Nothing is written: the settler is not running, outcomes are only queued for it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import statistics
import tempfile
import time
from typing import Any

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.runtime.contexts import Contexts
from ket.runtime.worker import TenantWorker
from ket.store import JobClaim, NewJob
from ket.store.memory import MemoryStore
from ket.store.types import ClaimedJob
from ket.transport import CaptureSender


async def noop(ctx: Any, input: Any) -> None:
    pass


def plain_noop(ctx: Any, input: Any) -> None:
    pass


HANDLERS = {
    "async": (noop, None, {}),
    "input": (noop, {"order_id": "string", "count": "int"}, {"order_id": "o-1", "count": 3}),
    "plain": (plain_noop, None, {}),
}


def build_catalog(handler: str, concurrency: int) -> tuple[Catalog, dict[str, Any]]:
    function, input, payload = HANDLERS[handler]
    options: dict[str, Any] = {"idempotent": True, "handler": function}
    if input is not None:
        options["input"] = input
    module = define_module(name="b", jobs={"noop": define_job(**options)})
    worker = {"queues": {"default": concurrency}}
    return Catalog.build(define_deployment(name="bench", modules=[module], worker=worker)), payload


async def claimed_jobs(store: MemoryStore, payload: dict[str, Any], count: int) -> list[ClaimedJob]:
    await store.job_insert([NewJob(name="b.noop", payload=payload) for _ in range(count)])
    return await store.job_claim(
        JobClaim(queue="default", limit=count, worker_id="bench", lease_seconds=600)
    )


async def one_run(handler: str, jobs: int, concurrency: int) -> float:
    """CPU microseconds per job of one pass over `jobs` claimed jobs."""
    built, payload = build_catalog(handler, concurrency)
    store = MemoryStore()
    with tempfile.TemporaryDirectory(prefix="ket-rbench-") as root:
        contexts = Contexts(
            store=store, catalog=built, tenant="bench", sender=CaptureSender(), storage_root=root
        )
        worker = TenantWorker(
            store=store, catalog=built, tenant="bench", worker_id="bench", contexts=contexts
        )
        queue = worker._queues["default"]
        # the settler (not running here) would take each outcome away at once: so does this,
        # keeping only its kind, rather than let 20k of them pile up for the garbage collector
        kinds: list[str] = []
        worker.settler.put = lambda result: kinds.append(result.kind)  # type: ignore[method-assign]
        warm = await claimed_jobs(store, payload, concurrency)
        await drain(worker, queue, warm, concurrency)  # caches and code paths warm
        claimed = await claimed_jobs(store, payload, jobs)
        gc.collect()
        began = time.process_time()
        await drain(worker, queue, claimed, concurrency)
        spent = time.process_time() - began
        if kinds.count("completed") != jobs + concurrency:
            raise SystemExit(f"not every job completed: {collections.Counter(kinds)}")
        worker._executor.shutdown(wait=True)  # nothing runs now: no stop() needed
    await store.close()
    return spent / jobs * 1e6


async def drain(worker: TenantWorker, queue: Any, claimed: list[ClaimedJob], size: int) -> None:
    """Launch `claimed` `size` at a time, each batch once the last one freed its slots."""
    sent = worker.attempts.clock()
    for start in range(0, len(claimed), size):
        for job in claimed[start : start + size]:
            queue.ready.append(worker.attempts.add(job, sent))
        worker._launch(queue)
        while queue.busy:
            queue.freed.clear()
            await queue.freed.wait()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--handler", choices=sorted(HANDLERS), default="async")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    per_job = []
    for run in range(1, args.runs + 1):
        per_job.append(await one_run(args.handler, args.jobs, args.concurrency))
        print(f"run {run}: {per_job[-1]:7.1f} µs CPU per job")
    print(
        f"{args.handler} handler, {args.jobs:,} jobs, concurrency {args.concurrency}: "
        f"median {statistics.median(per_job):.1f} µs CPU per job "
        f"(min {min(per_job):.1f}, max {max(per_job):.1f}, {args.runs} runs)"
    )


if __name__ == "__main__":
    asyncio.run(main())
