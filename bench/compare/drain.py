"""Measures 3 and 4: a backlog enqueued in bulk and ANALYZEd, then the worker CLI drains it.

The drain rate comes from the library's table (first claim to last completion), so interpreter
start-up is excluded. CPU is sampled from /proc at every poll and interpolated at those two
instants, so the CPU per job covers the drain window too.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from database import connect, fresh_database
from procfs import cpu_seconds, peak_rss_bytes, postgres_cpu_seconds
from result import Drain
from side import Side
from worker import WorkerProcess

STALL_S = 60.0  # no completion for this long fails the run


@dataclass(frozen=True, kw_only=True)
class Sample:
    at: float  # time.time()
    worker_cpu: float
    postgres_cpu: float


async def drain(side: Side, folder: Path, jobs: int, *, best: bool, poll_s: float) -> Drain:
    """Enqueue `jobs` in bulk, ANALYZE, run the worker until every job finished, verify."""
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        producer = await side.producer(database)
        try:
            await producer.enqueue_all(jobs)
        finally:
            await producer.close()
        if side.queued(connection) != jobs:
            raise RuntimeError(f"{side.name}: backlog has {side.queued(connection)} of {jobs}")
        connection.execute("ANALYZE")
        settings = side.best_label if best else "default"
        log = folder / f"{side.name}-{'best' if best else 'default'}.log"
        with WorkerProcess(side.worker(database, folder, best=best), folder, log) as worker:
            samples = _watch(side, connection, worker, jobs, poll_s)
            peak = peak_rss_bytes(worker.pid)  # at the end of the drain, before stopping
        side.verify(connection, jobs)
        window = side.window(connection)
    seconds = window.last_finish - window.first_claim

    def per_job_ms(counter: Callable[[Sample], float]) -> float:
        used = _at(samples, window.last_finish, counter) - _at(samples, window.first_claim, counter)
        return used / jobs * 1000

    return Drain(
        jobs=jobs,
        settings=settings,
        rate=jobs / seconds,
        seconds=seconds,
        worker_cpu_ms_per_job=per_job_ms(lambda s: s.worker_cpu),
        postgres_cpu_ms_per_job=per_job_ms(lambda s: s.postgres_cpu),
        worker_peak_rss_mb=peak / 1e6,
        spawn_to_first_completion_s=window.first_finish - worker.spawned,
    )


def _watch(
    side: Side, connection: psycopg.Connection, worker: WorkerProcess, jobs: int, poll_s: float
) -> list[Sample]:
    """Poll the COUNT of finished jobs every `poll_s`, sampling CPU each time."""
    samples: list[Sample] = []
    done, progressed = -1, time.monotonic()
    while True:
        samples.append(_sample(worker.pid))
        finished = side.finished(connection)
        if finished >= jobs:
            samples.append(_sample(worker.pid))  # after the last completion, for sure
            return samples
        if finished != done:
            done, progressed = finished, time.monotonic()
        elif time.monotonic() - progressed > STALL_S:
            raise RuntimeError(f"{side.name}: stuck at {finished}/{jobs}:\n{worker.tail()}")
        worker.check_alive()
        time.sleep(poll_s)


def _sample(pid: int) -> Sample:
    return Sample(at=time.time(), worker_cpu=cpu_seconds(pid), postgres_cpu=postgres_cpu_seconds())


def _at(samples: list[Sample], instant: float, counter: Callable[[Sample], float]) -> float:
    """A CPU counter at `instant`, linear between the two samples around it."""
    times = [s.at for s in samples]
    values = [counter(s) for s in samples]
    i = bisect_left(times, instant)
    if i == 0:
        return values[0]
    if i == len(times):
        return values[-1]
    t0, t1, v0, v1 = times[i - 1], times[i], values[i - 1], values[i]
    return v0 + (v1 - v0) * (instant - t0) / (t1 - t0)
