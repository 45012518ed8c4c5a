"""What a durable step costs the store, call by call: recording a step (`job_step_record`, one
insert under the attempt's fence) and reading a job's steps (`job_steps`, once per attempt that
takes a step), on PostgreSQL and SQLite.

    python3 bench/step_calls.py                 # 2,000 jobs, 3 steps each
    python3 bench/step_calls.py --jobs 5000 --backend sqlite

Each job is claimed, then its steps recorded one by one (as `await ctx.step(...)` records
them), then read back (as the job's next attempt would), then completed. Prints the median time
of each call. PostgreSQL: the database `ketbench_steps` on KET_BENCH_POSTGRES_URL's server
(default postgresql://root@127.0.0.1:5432/postgres), made afresh; SQLite: a file in a
temporary folder (durable commits, the default).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import psycopg

from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.store.types import JobClaim, Settle, StepRecord

ADMIN = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")


async def _run(url: str, jobs: int, steps: int) -> dict[str, list[float]]:
    store = await SqlStore.open(url, migrate=True)
    taken: dict[str, list[float]] = {"record": [], "read": []}
    try:
        for first in range(0, jobs, 1_000):
            batch = [NewJob(name="b.job", payload={"n": n}) for n in range(first, first + 1_000)]
            await store.job_insert(batch[: jobs - first])
        while True:
            claim = JobClaim(queue="default", limit=1, worker_id="bench", lease_seconds=30)
            claimed = await store.job_claim(claim)
            if not claimed:
                return taken
            job = claimed[0]
            for n in range(steps):
                value = f'{{"charge":"ch_{n}","amount":12.5}}'
                began = time.perf_counter()
                await store.job_step_record(
                    StepRecord(id=job.id, fence=job.fence, name=f"step-{n}", value=value)
                )
                taken["record"].append(time.perf_counter() - began)
            began = time.perf_counter()
            await store.job_steps(job.id)
            taken["read"].append(time.perf_counter() - began)
            await store.job_settle([Settle(id=job.id, fence=job.fence, outcome="completed")])
    finally:
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--backend", choices=("postgresql", "sqlite", "both"), default="both")
    args = parser.parse_args()
    backends = ("postgresql", "sqlite") if args.backend == "both" else (args.backend,)
    print(f"{args.jobs:,} jobs, {args.steps} steps each")
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix="ket-steps-") as folder:
            if backend == "postgresql":
                with psycopg.connect(ADMIN, autocommit=True) as admin:
                    admin.execute("DROP DATABASE IF EXISTS ketbench_steps WITH (FORCE)")
                    admin.execute("CREATE DATABASE ketbench_steps")
                url = ADMIN.rsplit("/", 1)[0] + "/ketbench_steps"
            else:
                url = f"sqlite:///{folder}/steps.db"
            taken = asyncio.run(_run(url, args.jobs, args.steps))
        for kind, times in taken.items():
            median = statistics.median(times[50:]) * 1000  # after the first: warmed
            print(f"  {backend:<10} {kind:<7} {median:6.3f} ms a call ({len(times):,} calls)")


if __name__ == "__main__":
    main()
