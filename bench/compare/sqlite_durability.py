"""ket alone: what durable SQLite commits cost, `synchronous=full` (ket's default) against
`normal`, in interleaved rounds (full, normal, normal, full, ...), each run on a fresh file.

    python3 bench/compare/sqlite_durability.py                       # 10,000 jobs, 3 rounds
    python3 bench/compare/sqlite_durability.py --jobs 2000 --rounds 1

Measures 1 and 3 of bench-method.md on SQLite: enqueue one at a time (`AsyncClient.aenqueue`,
client opened before the loop; jobs / wall seconds), and a backlog enqueued in bulk drained by
`ket worker` with default settings (jobs / (last completion - first claim), read from
`ket_jobs`; completion polled every 100 ms and verified: every job completed once). Then measure
5 from another process, as sqlite_latency.py takes it, with --probes probes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ket_app import JOB, deployment, order
from sqlite_file import SqliteFile, fresh_sqlite
from sqlite_latency import cell, sqlite_latency
from worker import WorkerProcess

from ket.client import open_async_client

LEVELS = ("full", "normal")
STALL_S = 60.0


async def enqueue_single(folder: Path, level: str, jobs: int) -> float:
    database = await asyncio.to_thread(fresh_sqlite, folder, level)
    client = await open_async_client(deployment(None), database_url=database.url)
    try:
        started = time.perf_counter()
        for _ in range(jobs):
            await client.aenqueue(JOB, order(0))
        return jobs / (time.perf_counter() - started)
    finally:
        await client.aclose()


async def drain(folder: Path, level: str, jobs: int) -> float:
    database = await asyncio.to_thread(fresh_sqlite, folder, level)
    client = await open_async_client(deployment(None), database_url=database.url)
    try:
        await client.aenqueue_many([(JOB, None)] * jobs)
    finally:
        await client.aclose()
    log = database.folder / "drain.log"
    with WorkerProcess(database.worker(), database.folder, log) as worker:
        await _finished(database, worker, jobs)
    if database.completed_once() != jobs or database.count("1 = 1") != jobs:
        raise RuntimeError(f"{level}: not every one of {jobs} jobs completed exactly once")
    return jobs / database.window_s()


async def _finished(database: SqliteFile, worker: WorkerProcess, jobs: int) -> None:
    done, progressed = -1, time.monotonic()
    while (finished := database.count("state = 'completed'")) < jobs:
        if finished != done:
            done, progressed = finished, time.monotonic()
        elif time.monotonic() - progressed > STALL_S:
            raise RuntimeError(f"stuck at {finished}/{jobs}:\n{worker.tail()}")
        worker.check_alive()
        await asyncio.sleep(0.1)


async def _run(jobs: int, rounds: int, probes: int) -> dict[str, dict[str, list[float]]]:
    results: dict[str, dict[str, list[float]]] = {
        level: {"single": [], "drain": [], "p50": [], "p99": []} for level in LEVELS
    }
    with tempfile.TemporaryDirectory(prefix="ket-sqlite-") as name:
        folder = Path(name)
        for round in range(1, rounds + 1):
            for level in LEVELS if round % 2 else reversed(LEVELS):
                mine = results[level]
                mine["single"].append(await enqueue_single(folder, level, jobs))
                mine["drain"].append(await drain(folder, level, jobs))
                latency = await sqlite_latency(folder, probes, level)
                mine["p50"].append(latency.p50_ms)
                mine["p99"].append(latency.p99_ms)
                print(
                    f"round {round} {level}: enqueue {mine['single'][-1]:,.0f} jobs/s, drain "
                    f"{mine['drain'][-1]:,.0f} jobs/s, p50 {latency.p50_ms:.1f} ms, "
                    f"p99 {latency.p99_ms:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per measure (10,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--probes", type=int, default=200, help="latency probes (200)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1 or args.probes < 2:
        parser.error("--jobs and --rounds must be at least 1, --probes at least 2")
    results = asyncio.run(_run(args.jobs, args.rounds, args.probes))
    print(f"\n{args.jobs:,} no-op jobs, {args.rounds} round(s); median (min-max)\n")
    print("| measure | synchronous=full (default) | synchronous=normal | full / normal |")
    print("| --- | ---: | ---: | ---: |")
    for key, label, digits in (
        ("single", "enqueue one at a time, jobs/s", 0),
        ("drain", f"process {args.jobs:,} backlog, default settings, jobs/s", 0),
        ("p50", "enqueue from another process to start, p50, ms", 1),
        ("p99", "enqueue from another process to start, p99, ms", 1),
    ):
        full, normal = results["full"][key], results["normal"][key]
        ratio = statistics.median(full) / statistics.median(normal)
        print(f"| {label} | {cell(full, digits)} | {cell(normal, digits)} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
