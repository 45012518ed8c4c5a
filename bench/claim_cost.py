"""What a claim under fleet-wide limits costs the SQL store, next to a plain claim: the store
alone (no worker), on PostgreSQL.

    python3 bench/claim_cost.py                  # 6,000 jobs, claims of 20, 3 rounds
    python3 bench/claim_cost.py --jobs 20000 --batch 100
    python3 bench/claim_cost.py --backend sqlite --kinds none,keyed_rate --batch 36

Each pass enqueues `--jobs` jobs keyed by an order id, then claims `--batch` at a time and
completes each batch at once, until the queue is empty, as a worker that never waits would. The
kinds: `none` (no limits), `concurrency` (at most 10 running per order: never reached), `both`
(that and a million starts a second: never reached), `reached` (at most 4 running at once in
all, the batch's completions keeping it there), `keyed_rate` (at most 10 running and 5 started
a minute per order: never reached, every start of the last minute kept). Rounds interleave
the kinds; prints the median jobs a second and time per claim, and the ratio to `none` in the
same run. The database
`ketbench_claim` on KET_BENCH_POSTGRES_URL's server (default
postgresql://root@127.0.0.1:5432/postgres) is made afresh; with `--backend sqlite`, a file in
a temporary folder (synchronous full, as the embedded default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import psycopg

from ket.store import JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from ket.store.types import ClaimLimits, JobLimits, Rate

ADMIN = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
URL = ADMIN.rsplit("/", 1)[0] + "/ketbench_claim"
NAME = "b.noop"
LIMITS: dict[str, ClaimLimits | None] = {
    "none": None,
    "concurrency": ClaimLimits(jobs={NAME: JobLimits(concurrency=10, rate=None)}),
    "both": ClaimLimits(
        jobs={NAME: JobLimits(concurrency=10, rate=Rate(limit=1_000_000, period_seconds=1))}
    ),
    "reached": ClaimLimits(concurrency=4),
    # a rate per order over a minute, never reached: every start of the last minute is kept
    "keyed_rate": ClaimLimits(
        jobs={NAME: JobLimits(concurrency=10, rate=Rate(limit=5, period_seconds=60))}
    ),
}


async def _pass(url: str, kind: str, jobs: int, batch: int) -> tuple[float, float]:
    """Jobs a second, and milliseconds a claim, of one pass."""
    store = await SqlStore.open(url)
    try:
        keyed = [
            NewJob(
                name=NAME,
                payload={"order_id": f"o{n}", "amount": n},
                concurrency_key=f'{NAME}|["o{n}"]',
                rate_key=f'{NAME}|["o{n}"]' if kind == "keyed_rate" else f"{NAME}|[]",
            )
            for n in range(jobs)
        ]
        for first in range(0, jobs, 1_000):
            await store.job_insert(keyed[first : first + 1_000])
        limits = LIMITS[kind]
        claim = JobClaim(
            queue="default", limit=batch, worker_id="bench", lease_seconds=30, limits=limits
        )
        done = claims = 0
        claiming = 0.0
        began = time.perf_counter()
        while done < jobs:
            at = time.perf_counter()
            claimed = await store.job_claim(claim)
            claiming += time.perf_counter() - at
            claims += 1
            settled = [Settle(id=c.id, fence=c.fence, outcome="completed") for c in claimed]
            await store.job_settle(settled)
            done += len(claimed)
        return jobs / (time.perf_counter() - began), claiming / claims * 1000
    finally:
        await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=6_000)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kinds", default="none,concurrency,both,reached")
    parser.add_argument("--backend", choices=("postgresql", "sqlite"), default="postgresql")
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    with tempfile.TemporaryDirectory(prefix="ketbench-claim-") as folder:
        url = URL
        if args.backend == "sqlite":
            url = f"sqlite:///{folder}/claim.db"
        else:
            with psycopg.connect(ADMIN, autocommit=True) as admin:
                admin.execute("DROP DATABASE IF EXISTS ketbench_claim")
                admin.execute("CREATE DATABASE ketbench_claim")
        store = await SqlStore.open(url, migrate=True)
        await store.close()
        rates: dict[str, list[float]] = {kind: [] for kind in kinds}
        each: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(args.rounds):
            for kind in kinds:
                rate, per_claim = await _pass(url, kind, args.jobs, args.batch)
                rates[kind].append(rate)
                each[kind].append(per_claim)
    print(
        f"{args.jobs} jobs, claims of {args.batch}, {args.rounds} rounds (medians), {args.backend}"
    )
    base = statistics.median(rates[kinds[0]])
    for kind in kinds:
        rate = statistics.median(rates[kind])
        print(
            f"  {kind:<12} {rate:7.0f} jobs/s  {rate / base:5.2f}x  "
            f"{statistics.median(each[kind]):6.3f} ms a claim"
        )


if __name__ == "__main__":
    asyncio.run(main())
