"""What one claim costs PostgreSQL, call by call: the plain claim (the function ket_claim) beside
the claim within fleet-wide limits (ket_limited_claim) with limits that are never reached.

    python3 bench/claim_calls.py                  # 20,000 jobs, claims of 36
    python3 bench/claim_calls.py --jobs 50000 --batch 100

One backlog, one autocommit connection: the kinds take turns claim by claim (plain,
concurrency, concurrency and rate, plain, ...), each completing what it claimed before the
next, so that the machine's drift between moments reaches every kind alike. Prints each
kind's median time of a claim (the call, as the store's lane makes it, rows fetched) and its
ratio to the plain claim's. The kinds' limits are those of bench/compare's KET_CMP_LIMITS:
`concurrency` (at most 10 running per order), `declared` (that and a million starts a
second). The database `ketbench_calls` on KET_BENCH_POSTGRES_URL's server (default
postgresql://root@127.0.0.1:5432/postgres) is made afresh.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

import psycopg

from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.store.sql import statement as stmt
from ket.store.sql.lane import text_of
from ket.store.sql.limit import array_literal
from ket.store.sql.now import time_params

ADMIN = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
URL = ADMIN.rsplit("/", 1)[0] + "/ketbench_calls"
NAME = "b.noop"
# by kind: the limits as the store passes them (None: the plain claim)
LIMITS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "concurrency": {"p_concurrency": [10], "p_rate": [None], "p_period": [None]},
    "declared": {"p_concurrency": [10], "p_rate": [1_000_000], "p_period": [1.0]},
}


async def _backlog(jobs: int) -> None:
    """`jobs` jobs keyed by an order, as an app with the bench's limits enqueues them."""
    store = await SqlStore.open(URL, migrate=True)
    try:
        for first in range(0, jobs, 1_000):
            await store.job_insert(
                [
                    NewJob(
                        name=NAME,
                        payload={"order_id": f"o{n}", "amount": n},
                        concurrency_key=f'{NAME}|["o{n}"]',
                        rate_key=f"{NAME}|[]",
                    )
                    for n in range(first, min(first + 1_000, jobs))
                ]
            )
    finally:
        await store.close()


def _calls(connection: psycopg.Connection[Any], batch: int) -> dict[str, Any]:
    """By kind, a call that claims up to `batch` jobs and returns their ids."""
    base = {**time_params(None, lease=30.0), "p_queue": "default", "limit": batch}
    base["p_worker_id"] = "bench"
    plain, limited = text_of(stmt.CLAIM), text_of(stmt.LIMITED_CLAIM)

    def call(kind: str) -> Any:
        limits = LIMITS[kind]
        if limits is None:
            text, params = plain.text, plain.params(base)
        else:
            arrays = {name: array_literal(values) for name, values in limits.items()}
            params = limited.params(
                {
                    **base,
                    "p_names": array_literal([NAME]),
                    **arrays,
                    "p_queue_concurrency": None,
                    "p_queue_rate": None,
                    "p_queue_period": None,
                }
            )
            text = limited.text

        def run() -> list[int]:
            rows = connection.execute(text, params).fetchall()
            return [row[0] for row in rows if row[0] is not None]

        return run

    return {kind: call(kind) for kind in LIMITS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=36)
    args = parser.parse_args()
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS ketbench_calls WITH (FORCE)")
        admin.execute("CREATE DATABASE ketbench_calls")
    asyncio.run(_backlog(args.jobs))
    taken: dict[str, list[float]] = {kind: [] for kind in LIMITS}
    with psycopg.connect(URL, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE ket_jobs")
        calls = _calls(connection, args.batch)
        done = 0
        while done < args.jobs - len(LIMITS) * args.batch:
            for kind, call in calls.items():
                began = time.perf_counter()
                ids = call()
                taken[kind].append(time.perf_counter() - began)
                done += len(ids)
                connection.execute(
                    "UPDATE ket_jobs SET state = 'completed', finished_at = now(), "
                    "lease_until = NULL WHERE id = ANY (%s)",
                    [ids],
                )
    print(f"{args.jobs:,} jobs, claims of {args.batch}, kinds taking turns claim by claim")
    base = statistics.median(taken["plain"][5:])
    for kind, times in taken.items():
        median = statistics.median(times[5:])  # the first: plans made, caches warmed
        print(f"  {kind:<12} {median * 1000:6.3f} ms a claim  {median / base:5.2f}x plain")


if __name__ == "__main__":
    main()
