"""ket alone: idle enqueue-to-start latency on the embedded SQLite store, enqueued from another
process (PgQueuer has no SQLite).

    python3 bench/compare/sqlite_latency.py                # 3 rounds of 200 probes
    python3 bench/compare/sqlite_latency.py --rounds 1 --probes 30
    python3 bench/compare/sqlite_latency.py --synchronous normal   # ket's default is full

`ket worker` (default settings) runs as a subprocess on a fresh SQLite file; this process, the
harness, enqueues each probe with `open_client(...).enqueue(...)`, as a web application's process
would. The probes are measure 5 of bench-method.md: a warm-up job, 1 s idle, then 200 probes 20 ms
apart; latency = the handler's `time.time()` at start - `time.time()` just before the enqueue
call. `run.py` runs it once in each ket pass.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from ket_app import JOB, deployment, order
from latency import GAP_S, PROBE_TIMEOUT_S, SETTLE_S, WARM_UP_TIMEOUT_S, probe, quantiles
from result import Latency
from side import Command
from sqlite_file import SqliteFile, fresh_sqlite
from starts import STARTS_ENV, StartReader
from worker import WorkerProcess

from ket.client import Client, open_client


class SqliteProducer:
    """The synchronous client of a web application's process, called from the harness's loop."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def enqueue_one(self) -> int:
        return self._client.enqueue(JOB, order(0)).id

    async def enqueue_all(self, jobs: int) -> None:
        self._client.enqueue_many([(JOB, None)] * jobs)

    async def close(self) -> None:
        self._client.close()


async def sqlite_latency(folder: Path, probes: int, synchronous: str | None = None) -> Latency:
    """`probes` probes from this process into an idle default `ket worker` on a fresh file
    (`synchronous`: the URL's ?synchronous=, else ket's default)."""
    database = await asyncio.to_thread(fresh_sqlite, folder, synchronous)
    starts = database.folder / "starts.txt"
    plain = database.worker()
    command = Command(argv=plain.argv, env={**plain.env, STARTS_ENV: str(starts)})
    reader = StartReader(starts)
    producer = SqliteProducer(open_client(deployment(None), database_url=database.url))
    try:
        log = database.folder / "worker.log"
        with WorkerProcess(command, database.folder, log) as worker:
            await probe(producer, reader, worker, WARM_UP_TIMEOUT_S)
            await asyncio.sleep(SETTLE_S)
            delays = []
            for _ in range(probes):
                await asyncio.sleep(GAP_S)
                delays.append(await probe(producer, reader, worker, PROBE_TIMEOUT_S))
            await _settled(database, worker, probes + 1)
    finally:
        await producer.close()
    return quantiles(delays)


async def _settled(database: SqliteFile, worker: WorkerProcess, jobs: int) -> None:
    """Wait until every probe completed once (a start is written before it settles)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROBE_TIMEOUT_S
    while database.completed_once() < jobs:
        if loop.time() > deadline:
            raise RuntimeError(f"SQLite probes not all completed once:\n{worker.tail()}")
        worker.check_alive()
        await asyncio.sleep(0.01)


def cell(values: list[float], digits: int = 1) -> str:
    """median (min-max); the value alone when there is one."""
    if len(values) == 1:
        return f"{values[0]:,.{digits}f}"
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs, each on a fresh file (3)")
    parser.add_argument("--probes", type=int, default=200, help="probes per run (200)")
    parser.add_argument("--synchronous", help="the sqlite URL's ?synchronous= (ket's default)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.probes < 2:
        parser.error("--rounds must be at least 1, --probes at least 2")
    runs = []
    with tempfile.TemporaryDirectory(prefix="ket-sqlite-") as folder:
        for round in range(1, args.rounds + 1):
            result = asyncio.run(sqlite_latency(Path(folder), args.probes, args.synchronous))
            print(
                f"round {round}: p50 {result.p50_ms:.1f} / p95 {result.p95_ms:.1f} / "
                f"p99 {result.p99_ms:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
            runs.append(result)
    print(
        f"embedded SQLite (synchronous {args.synchronous or 'default'}), enqueue from another "
        f"process, {args.rounds} run(s) of {args.probes} probes, median (min-max) ms: "
        f"p50 {cell([r.p50_ms for r in runs])}, p95 {cell([r.p95_ms for r in runs])}, "
        f"p99 {cell([r.p99_ms for r in runs])}"
    )


if __name__ == "__main__":
    main()
