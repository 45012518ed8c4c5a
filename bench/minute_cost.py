"""What one minute count of the dashboard's charts costs (MinuteStore.minute_record): the store
alone, on PostgreSQL, for a minute that saw `--jobs` jobs enqueued and finished (a twentieth of
them failing once first).

    python3 bench/minute_cost.py                  # 100,000 jobs, 3 rounds
    python3 bench/minute_cost.py --jobs 300000    # a minute of a 5,000 jobs/s drain

Each round makes the minute afresh: a count (its marks), the jobs written as a drain leaves
them (enqueued and completed in the minute, one in twenty after a failed attempt), a count
(which marks what the minute committed), then the timed count, which counts them. Prints the median
seconds of that count, and what share of one connection's minute it takes. The database
`ketbench_minutes` on KET_BENCH_POSTGRES_URL's server (default
postgresql://root@127.0.0.1:5432/postgres) is made afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from datetime import timedelta

import psycopg

from ket.store.sql import SqlStore
from ket.store.types import MinuteQuery

ADMIN = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
URL = ADMIN.rsplit("/", 1)[0] + "/ketbench_minutes"


def _fresh_database() -> None:
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS ketbench_minutes WITH (FORCE)")
        admin.execute("CREATE DATABASE ketbench_minutes")


async def _round(jobs: int) -> float:
    """Seconds of the count that counts a minute of `jobs` jobs."""
    _fresh_database()
    store = await SqlStore.open(URL, migrate=True)
    try:
        await store.minute_record(0)
        _fill(jobs)
        await store.minute_record(0)  # marks what the minute committed
        started = time.perf_counter()
        await store.minute_record(0)  # counts it
        took = time.perf_counter() - started
        found = await store.minute_list(MinuteQuery(since=await store.now() - timedelta(hours=1)))
        counted = sum(m.enqueued for m in found.minutes)
        assert counted == jobs, f"counted {counted} of {jobs} jobs enqueued"
        assert sum(m.failed for m in found.minutes) == jobs // 20
        assert sum(m.completed for m in found.minutes) == jobs
        return took
    finally:
        await store.close()


def _fill(jobs: int) -> None:
    """A minute's jobs, as a drain leaves them: enqueued within the last minute and completed
    now (after the count before: in the span the next count counts), one in twenty after a
    failed attempt (its error entry). Written by SQL in bulk: the drain
    itself is not what this measures."""
    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute(
            """INSERT INTO ket_jobs (name, queue, state, priority, payload, payload_version,
                attempt, max_attempts, run_at, enqueued_at, attempted_at, finished_at,
                worker_id, fence, cancel_requested)
            SELECT 'b.job', 'default', 'completed', 0,
                jsonb_build_object('order_id', 'o' || n, 'amount', n), 1,
                CASE WHEN n %% 20 = 0 THEN 2 ELSE 1 END, 3,
                now() - interval '50 seconds' + n * interval '40 seconds' / %(jobs)s,
                now() - interval '50 seconds' + n * interval '40 seconds' / %(jobs)s,
                now() - interval '49 seconds' + n * interval '40 seconds' / %(jobs)s,
                now(), 'w', 1, false
            FROM generate_series(1, %(jobs)s) AS n""",
            {"jobs": jobs},
        )
        connection.execute(
            """INSERT INTO ket_job_errors (job_id, attempt, at, error, started_at, worker_id)
            SELECT id, 1, finished_at, 'boom', attempted_at, 'w' FROM ket_jobs
            WHERE attempt = 2""",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    took = [asyncio.run(_round(args.jobs)) for _ in range(args.rounds)]
    median = statistics.median(took)
    print(
        f"a count of a minute of {args.jobs:,} jobs: {median:.3f} s median "
        f"({min(took):.3f}-{max(took):.3f}), {median / 60:.2%} of one connection's minute"
    )


if __name__ == "__main__":
    main()
