"""The backlog ratio on PostgreSQL: how fast `ket worker` (default settings) drains a large backlog
relative to a small one, by the method of bench-method.md, ket alone.

    python3 bench/backlog_ratio.py                       # 10,000 vs 200,000 jobs, 3 rounds
    python3 bench/backlog_ratio.py --small 2000 --large 20000 --rounds 1   # a smoke run

Each drain gets a fresh database (`ket migrate`), a backlog enqueued in bulk and ANALYZEd, then
`ket worker` as a subprocess; the rate is jobs / (last finish - first claim) from `ket_jobs`, and
every job must have completed exactly once. Rounds interleave the sizes (small, large, large,
small, ...). CPU per job, over the drain window (sampled at every poll, interpolated at the first
claim and the last finish), is the worker process's and that of the PostgreSQL backends serving it
(so other databases' work on a shared machine does not count); buffers per job are the shared
buffers the drain's database read or hit (pg_stat_database, the harness's polls included), a
measure of the database's work that a busy machine does not inflate as it does CPU time.
Half-way through each drain the claim statement runs once under EXPLAIN (ANALYZE, BUFFERS) in a
transaction that is rolled back: the buffers its index scan of `ket_jobs_runnable` read show how
many dead index entries the claim walks past. The table's vacuum count at the end shows how often
the worker vacuumed it (autovacuum's runs are counted apart). Reuses bench/compare (database,
worker process, ket side).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "compare"))

import psycopg  # noqa: E402
from database import connect, fresh_database  # noqa: E402
from ket_side import KetSide  # noqa: E402
from procfs import cpu_seconds, load_average  # noqa: E402
from worker import WorkerProcess  # noqa: E402

from ket.store.sql import statement as stmt  # noqa: E402
from ket.store.sql.lane import text_of  # noqa: E402
from ket.store.sql.now import time_params  # noqa: E402

STALL_S = 60.0


@dataclass(frozen=True, kw_only=True)
class Run:
    jobs: int
    rate: float
    claim_buffers: int  # the runnable index scan of one 10-job claim, half-way
    claim_ms: float
    vacuums: int
    server_cpu_ms: float  # per job: the CPU time of the PostgreSQL backends serving the worker
    buffers: float  # per job: shared buffers the database's backends read or hit
    worker_cpu_ms: float  # per job: the worker process's CPU time


def _claim() -> tuple[str, dict[str, Any]]:
    """The claim as the store's lane runs it, with the parameters of a 10-job claim."""
    claim = text_of(stmt.CLAIM)
    given = {**time_params(None, lease=30.0), "p_queue": "default", "limit": 10}
    return claim.text, claim.params({**given, "p_worker_id": "bench-probe"})


def _index_buffers(plan: dict[str, Any]) -> int:
    if plan.get("Index Name") == "ket_jobs_runnable":
        return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    return sum(_index_buffers(child) for child in plan.get("Plans", ()))


def _probe_claim(connection: psycopg.Connection) -> tuple[int, float]:
    """One claim under EXPLAIN ANALYZE, rolled back: the runnable index's buffers, and ms."""
    sql, params = _claim()
    with connection.transaction(force_rollback=True):
        explain = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql
        row = connection.execute(explain, params).fetchone()  # type: ignore[arg-type]
    assert row is not None
    result = row[0][0]
    return _index_buffers(result["Plan"]), float(result["Execution Time"])


def _server_cpu(connection: psycopg.Connection) -> float:
    """CPU seconds so far of every backend on this database but the harness's own (the worker's
    connections: claims, settlements, vacuums). Unlike the whole server's CPU, other databases'
    work on a shared machine does not count."""
    pids = connection.execute(
        "SELECT pid FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    ).fetchall()
    return sum(cpu_seconds(int(pid)) for (pid,) in pids)


@dataclass(frozen=True, kw_only=True)
class Sample:
    at: float  # time.time()
    worker_cpu: float
    server_cpu: float


def _sample(connection: psycopg.Connection, worker_pid: int) -> Sample:
    return Sample(
        at=time.time(), worker_cpu=cpu_seconds(worker_pid), server_cpu=_server_cpu(connection)
    )


def _at(samples: list[Sample], instant: float, counter: Callable[[Sample], float]) -> float:
    """A sampled counter at `instant`, linear between the two samples around it."""
    i = bisect_left([sample.at for sample in samples], instant)
    if i == 0:
        return counter(samples[0])
    if i == len(samples):
        return counter(samples[-1])
    before, after = samples[i - 1], samples[i]
    share = (instant - before.at) / (after.at - before.at)
    return counter(before) + (counter(after) - counter(before)) * share


def _buffers(connection: psycopg.Connection) -> int:
    """Shared buffers read or hit in this database so far, by every backend that has reported
    (this one's own pending counts are sent first). A measure of work that, unlike CPU time, a
    busy machine does not inflate."""
    connection.execute("SELECT pg_stat_force_next_flush()")
    return _count(
        connection,
        "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()",
    )


def _count(connection: psycopg.Connection, sql: Any) -> int:
    row = connection.execute(sql).fetchone()
    return int(row[0]) if row else 0


async def drain(jobs: int, folder: Path) -> Run:
    side = KetSide()
    poll_s = 1.0 if jobs >= 200_000 else 0.1
    with fresh_database() as database, connect(database) as connection:
        side.install(database, folder)
        producer = await side.producer(database)
        try:
            await producer.enqueue_all(jobs)
        finally:
            await producer.close()
        connection.execute("ANALYZE")
        probe: tuple[int, float] | None = None
        log = folder / f"worker-{jobs}.log"
        samples: list[Sample] = []
        buffers_before = _buffers(connection)
        with WorkerProcess(side.worker(database, folder, best=False), folder, log) as worker:
            done, progressed = -1, time.monotonic()
            while True:
                samples.append(_sample(connection, worker.pid))
                finished = side.finished(connection)
                if finished >= jobs:  # a sample after the last finish, for sure
                    samples.append(_sample(connection, worker.pid))
                    break
                if probe is None and finished >= jobs // 2:
                    probe = _probe_claim(connection)
                if finished != done:
                    done, progressed = finished, time.monotonic()
                elif time.monotonic() - progressed > STALL_S:
                    raise RuntimeError(f"stuck at {finished}/{jobs}:\n{worker.tail()}")
                worker.check_alive()
                time.sleep(poll_s)
        time.sleep(0.5)  # the worker's backends send their counts as they exit
        database_buffers = _buffers(connection) - buffers_before
        side.verify(connection, jobs)
        window = side.window(connection)
        vacuums = _count(
            connection, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'ket_jobs'"
        )
    claim_buffers, claim_ms = probe if probe is not None else (0, 0.0)
    rate = jobs / (window.last_finish - window.first_claim)

    def per_job_ms(counter: Callable[[Sample], float]) -> float:
        """A CPU counter's growth over the drain window (first claim to last finish) per job."""
        used = _at(samples, window.last_finish, counter) - _at(samples, window.first_claim, counter)
        return used / jobs * 1000

    return Run(
        jobs=jobs,
        rate=rate,
        claim_buffers=claim_buffers,
        claim_ms=claim_ms,
        vacuums=vacuums,
        server_cpu_ms=per_job_ms(lambda sample: sample.server_cpu),
        buffers=database_buffers / jobs,
        worker_cpu_ms=per_job_ms(lambda sample: sample.worker_cpu),
    )


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=10_000, help="the small backlog (10,000)")
    parser.add_argument("--large", type=int, default=200_000, help="the large backlog (200,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    args = parser.parse_args(argv)
    if args.small < 1 or args.large < 1 or args.rounds < 1:
        parser.error("--small, --large and --rounds must be at least 1")
    runs: dict[int, list[Run]] = {args.small: [], args.large: []}
    with tempfile.TemporaryDirectory(prefix="ket-backlog-") as folder:
        for round in range(args.rounds):
            order = (args.small, args.large) if round % 2 == 0 else (args.large, args.small)
            for jobs in order:
                before = load_average()
                run = await drain(jobs, Path(folder))
                runs[jobs].append(run)
                print(
                    f"round {round + 1}: {jobs:,} jobs {run.rate:,.0f}/s, claim half-way "
                    f"{run.claim_buffers} buffers {run.claim_ms:.2f} ms, {run.vacuums} vacuums, "
                    f"per job: {run.buffers:.1f} buffers, CPU PostgreSQL "
                    f"{run.server_cpu_ms:.3f} ms, worker {run.worker_cpu_ms:.3f} ms "
                    f"(load {before:.2f} -> {load_average():.2f})",
                    flush=True,
                )
    small = [r.rate for r in runs[args.small]]
    large = [r.rate for r in runs[args.large]]
    print(f"{args.small:>9,} jobs: {_median(small)} jobs/s")
    print(f"{args.large:>9,} jobs: {_median(large)} jobs/s")
    ratios = [b / a for a, b in zip(small, large, strict=True)]
    print(
        f"ratio of medians {statistics.median(large) / statistics.median(small):.2f} "
        f"(per round {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    buffers = [float(r.claim_buffers) for r in runs[args.large]]
    print(f"claim half-way through {args.large:,}: {_median(buffers)} index buffers")
    for jobs in (args.small, args.large):
        server = statistics.median(r.server_cpu_ms for r in runs[jobs])
        worker = statistics.median(r.worker_cpu_ms for r in runs[jobs])
        buffers = statistics.median(r.buffers for r in runs[jobs])
        print(
            f"per job at {jobs:,}: {buffers:.1f} buffers, CPU PostgreSQL {server:.3f} ms, "
            f"worker {worker:.3f} ms (medians)"
        )


if __name__ == "__main__":
    asyncio.run(main())
