"""Measure 5: idle enqueue-to-start latency on a worker with default settings.

Each probe takes `time.time()`, then enqueues one job; its handler records `time.time()` as it
starts (see starts.py). The next probe goes 20 ms after the previous job started, so the worker
is idle for each. One warm-up job, not counted, first proves the worker is up.
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from pathlib import Path

import psycopg
from database import connect, fresh_database
from result import Latency
from side import Command, Producer, Side
from starts import STARTS_ENV, StartReader
from worker import WorkerProcess

GAP_S = 0.020
SETTLE_S = 1.0  # idle after the warm-up job, before the first probe
WARM_UP_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 10.0


async def latency(side: Side, folder: Path, probes: int) -> Latency:
    """`probes` probes into an idle default worker; p50 / p95 / p99 in ms."""
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        path = folder / f"starts-{side.name}-{secrets.token_hex(4)}.txt"
        plain = side.worker(database, folder, best=False)
        command = Command(argv=plain.argv, env={**plain.env, STARTS_ENV: str(path)})
        reader = StartReader(path)
        producer = await side.producer(database)
        try:
            log = folder / f"{side.name}-latency.log"
            with WorkerProcess(command, folder, log) as worker:
                await probe(producer, reader, worker, WARM_UP_TIMEOUT_S)
                await asyncio.sleep(SETTLE_S)
                delays = []
                for _ in range(probes):
                    await asyncio.sleep(GAP_S)
                    delays.append(await probe(producer, reader, worker, PROBE_TIMEOUT_S))
                await _settled(side, connection, worker, probes + 1)
        finally:
            await producer.close()
        side.verify(connection, probes + 1)
    return quantiles(delays)


def quantiles(delays: list[float]) -> Latency:
    """p50 / p95 / p99 of the delays (seconds), in ms."""
    cuts = statistics.quantiles(delays, n=100, method="inclusive")
    return Latency(
        probes=len(delays),
        p50_ms=cuts[49] * 1000,
        p95_ms=cuts[94] * 1000,
        p99_ms=cuts[98] * 1000,
        samples_ms=[d * 1000 for d in delays],
    )


async def probe(
    producer: Producer, reader: StartReader, worker: WorkerProcess, timeout: float
) -> float:
    """Enqueue one job and wait for its handler to start; the delay in seconds."""
    sent = time.time()  # just before the enqueue call: the round trip and commit count
    job_id = await producer.enqueue_one()
    while job_id not in reader.read():
        if time.time() - sent > timeout:
            raise RuntimeError(f"job {job_id} did not start in {timeout} s:\n{worker.tail()}")
        worker.check_alive()
        await asyncio.sleep(0.001)
    return reader.starts[job_id] - sent


async def _settled(
    side: Side, connection: psycopg.Connection, worker: WorkerProcess, jobs: int
) -> None:
    """Wait until every probe is finished in the table (a start is written before it settles)."""
    waited = time.monotonic()
    while side.finished(connection) < jobs:
        if time.monotonic() - waited > PROBE_TIMEOUT_S:
            raise RuntimeError(f"{side.name}: probes not all finished:\n{worker.tail()}")
        worker.check_alive()
        await asyncio.sleep(0.01)
