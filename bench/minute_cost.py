"""What one minute count of the dashboard's charts costs (MinuteStore.minute_record): the store
alone, on PostgreSQL, for a minute that saw `--jobs` jobs enqueued and finished (a twentieth of
them failing once first).

    python3 bench/minute_cost.py                  # 100,000 jobs, 3 rounds
    python3 bench/minute_cost.py --jobs 300000    # a minute of a 5,000 jobs/s drain

Each round makes the minute afresh: it enqueues the jobs, claims and settles them 1,000 at a
time (a twentieth fail once and are retried), with a count before (its marks) and after (which
marks what the span committed); then times the count that counts them. Prints the median
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

from ket.store import JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from ket.store.types import ErrorInfo, MinuteQuery

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
        for first in range(0, jobs, 1_000):
            size = min(1_000, jobs - first)
            await store.job_insert(
                [NewJob(name="b.job", payload={"order_id": f"o{first + n}"}) for n in range(size)]
            )
        for retry in (False, True):
            while claimed := await store.job_claim(
                JobClaim(queue="default", limit=1_000, worker_id="w", lease_seconds=600)
            ):
                await store.job_settle(
                    [
                        Settle(
                            id=job.id,
                            fence=job.fence,
                            outcome="retryable",
                            error=ErrorInfo(error="boom", traceback=None),
                        )
                        if not retry and job.id % 20 == 0
                        else Settle(id=job.id, fence=job.fence, outcome="completed")
                        for job in claimed
                    ]
                )
        await store.minute_record(0)  # marks what the minute committed
        started = time.perf_counter()
        await store.minute_record(0)  # counts it
        took = time.perf_counter() - started
        found = await store.minute_list(MinuteQuery(since=await store.now() - timedelta(hours=1)))
        counted = sum(m.enqueued for m in found.minutes)
        assert counted == jobs, f"counted {counted} of {jobs} jobs enqueued"
        return took
    finally:
        await store.close()


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
