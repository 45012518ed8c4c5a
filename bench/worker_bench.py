"""Worker benchmark: a 10k backlog of no-op jobs processed by one worker, and enqueue-to-start
latency on an idle worker, on PostgreSQL and SQLite. Medians of --runs runs.

    python bench/worker_bench.py                 # both backends, 3 runs
    python bench/worker_bench.py --backend postgresql --runs 1 --backlog 2000

"default settings" is the deployment's default worker (one queue, concurrency 10); "best
settings" raises the queue's concurrency to 100. Latency: one job enqueued at a time into an
idle worker, time from commit to the handler starting (p50 / p99 over --samples jobs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.runtime.contexts import Contexts
from ket.runtime.worker import TenantWorker
from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.transport import CaptureSender

PG_URL = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
started_at: dict[int, float] = {}


async def noop(ctx: Any, input: Any) -> None:
    started_at[ctx.job.id] = time.perf_counter()


def catalog(concurrency: int) -> Catalog:
    module = define_module(name="b", jobs={"noop": define_job(idempotent=True, handler=noop)})
    worker = {"queues": {"default": concurrency}, "poll_min_ms": 50, "poll_max_ms": 2_000}
    return Catalog.build(define_deployment(name="bench", modules=[module], worker=worker))


def make_worker(store: SqlStore, built: Catalog, pool: ThreadPoolExecutor) -> TenantWorker:
    contexts = Contexts(
        store=store,
        catalog=built,
        tenant="bench",
        sender=CaptureSender(),
        storage_root=tempfile.gettempdir(),
    )
    return TenantWorker(
        store=store,
        catalog=built,
        tenant="bench",
        worker_id="bench",
        executor=pool,
        contexts=contexts,
    )


async def open_store(backend: str, place: str) -> SqlStore:
    if backend == "sqlite":
        return await SqlStore.open(f"sqlite:///{place}/jobs.db", migrate=True)
    return await SqlStore.open(
        PG_URL, migrate=True, connect_args={"options": f"-c search_path={place}"}
    )


async def backlog_rate(backend: str, place: str, count: int, concurrency: int) -> float:
    store = await open_store(backend, place)
    async with store.engine.begin() as connection:
        await connection.exec_driver_sql("DELETE FROM ket_jobs")
    for start in range(0, count, 10_000):
        await store.job_insert([NewJob(name="b.noop") for _ in range(min(10_000, count - start))])
    with ThreadPoolExecutor(4) as pool:
        worker = make_worker(store, catalog(concurrency), pool)
        began = time.perf_counter()
        worker.start()
        while True:
            stats = await store.job_stats()
            done = sum(n for (state, _), n in stats.counts.items() if state == "completed")
            if done >= count:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - began
        await worker.stop()
    await store.close()
    return count / elapsed


async def latency(backend: str, place: str, samples: int) -> tuple[float, float]:
    store = await open_store(backend, place)
    producer = await open_store(backend, place)
    started_at.clear()  # ids start again in every database
    delays: list[float] = []
    with ThreadPoolExecutor(4) as pool:
        worker = make_worker(store, catalog(10), pool)
        worker.start()
        await asyncio.sleep(0.5)
        for _ in range(samples):
            await asyncio.sleep(0.05)  # idle between jobs
            sent = time.perf_counter()
            [inserted] = await producer.job_insert([NewJob(name="b.noop")])
            while inserted.id not in started_at:
                await asyncio.sleep(0.0005)
            delays.append((started_at[inserted.id] - sent) * 1000)
        await worker.stop()
    await producer.close()
    await store.close()
    delays.sort()
    return statistics.median(delays), delays[int(len(delays) * 0.99) - 1]


async def one_backend(backend: str, runs: int, count: int, samples: int) -> None:
    schema = f"ket_wbench_{uuid.uuid4().hex[:8]}"
    folder = tempfile.TemporaryDirectory(prefix="ket-wbench-")
    place = folder.name if backend == "sqlite" else schema
    if backend == "postgresql":
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {schema}")
    try:
        default = [await backlog_rate(backend, place, count, 10) for _ in range(runs)]
        best = [await backlog_rate(backend, place, count, 100) for _ in range(runs)]
        lat = [await latency(backend, place, samples) for _ in range(runs)]
    finally:
        folder.cleanup()
        if backend == "postgresql":
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f"DROP SCHEMA {schema} CASCADE")
    print(f"\n{backend}: median of {runs} run(s)")
    rate = statistics.median(default)
    print(f"  process a {count:,} backlog, default settings: {rate:10,.0f} jobs/s")
    print(
        f"  process a {count:,} backlog, best settings:    {statistics.median(best):10,.0f} jobs/s"
    )
    p50 = statistics.median(x for x, _ in lat)
    p99 = statistics.median(y for _, y in lat)
    print(f"  idle worker, enqueue-to-start p50 / p99:      {p50:6.1f} / {p99:.1f} ms")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    for backend in backends:
        await one_backend(backend, args.runs, args.backlog, args.samples)


if __name__ == "__main__":
    asyncio.run(main())
