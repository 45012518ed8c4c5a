"""Store benchmark: enqueue and claim+complete throughput of the SQL store, PostgreSQL and SQLite.

Not a test: it prints a table of medians over --runs runs, each row next to a baseline measured
in the same run on the same database (plain INSERTs of the same row shape without ket), so the
ratio says what ket's guarantees cost on this machine at this moment.

    python bench/store_bench.py                       # both backends, 3 runs
    python bench/store_bench.py --backend sqlite --runs 1 --quick

PostgreSQL: KET_BENCH_POSTGRES_URL (default postgresql://root@127.0.0.1:5432/postgres); the
benchmark works in a schema of its own and drops it afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ket.store import JobClaim, NewJob, Settle
from ket.store.sql import SqlStore

PG_URL = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
PAYLOAD = {"order_id": "o-1001", "note": "benchmark"}


@dataclass
class Sizes:
    singles: int
    bulk: int
    backlog_small: int
    backlog_large: int
    process_batch1: int
    process_batch50: int


FULL = Sizes(2_000, 10_000, 10_000, 200_000, 2_000, 10_000)
QUICK = Sizes(300, 2_000, 2_000, 20_000, 300, 2_000)


class Backend:
    """One database for the whole benchmark: opens stores and measures the baseline."""

    name = ""

    async def store(self) -> SqlStore:
        raise NotImplementedError

    def baseline_single(self, count: int) -> float:
        raise NotImplementedError

    def baseline_bulk(self, count: int) -> float:
        raise NotImplementedError

    async def reset(self, store: SqlStore) -> None:
        async with store.engine.begin() as connection:
            await connection.exec_driver_sql("DELETE FROM ket_job_errors")
            await connection.exec_driver_sql("DELETE FROM ket_jobs")

    def close(self) -> None:
        pass


class Postgres(Backend):
    name = "postgresql"

    def __init__(self) -> None:
        self.schema = f"ket_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_URL, autocommit=True) as connection:
            connection.execute(f"CREATE SCHEMA {self.schema}")
            connection.execute(f"SET search_path = {self.schema}")
            connection.execute(
                "CREATE TABLE plain (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, "
                "queue TEXT NOT NULL, state TEXT NOT NULL, payload JSONB NOT NULL, "
                "run_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )

    async def store(self) -> SqlStore:
        return await SqlStore.open(
            PG_URL, migrate=True, connect_args={"options": f"-c search_path={self.schema}"}
        )

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(PG_URL, autocommit=True, options=f"-c search_path={self.schema}")

    def baseline_single(self, count: int) -> float:
        text = json.dumps(PAYLOAD)
        with self._connect() as connection:
            started = time.perf_counter()
            for _ in range(count):
                connection.execute(
                    "INSERT INTO plain (name, queue, state, payload) VALUES (%s, %s, %s, %s) "
                    "RETURNING id",
                    ("bench.noop", "default", "available", text),
                ).fetchone()
            return count / (time.perf_counter() - started)

    def baseline_bulk(self, count: int) -> float:
        text = json.dumps(PAYLOAD)
        with self._connect() as connection:
            started = time.perf_counter()
            statement = "COPY plain (name, queue, state, payload) FROM STDIN"
            with (
                connection.transaction(),
                connection.cursor() as cursor,
                cursor.copy(statement) as copy,
            ):
                for _ in range(count):
                    copy.write_row(("bench.noop", "default", "available", text))
            return count / (time.perf_counter() - started)

    def close(self) -> None:
        with psycopg.connect(PG_URL, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {self.schema} CASCADE")


class Sqlite(Backend):
    name = "sqlite"

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="ket-bench-")
        self.path = Path(self.folder.name) / "jobs.db"
        with sqlite3.connect(self.path) as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(
                "CREATE TABLE plain (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "queue TEXT NOT NULL, state TEXT NOT NULL, payload TEXT NOT NULL, "
                "run_at INTEGER NOT NULL)"
            )

    async def store(self) -> SqlStore:
        return await SqlStore.open(f"sqlite:///{self.path}", migrate=True)

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, isolation_level=None)
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def baseline_single(self, count: int) -> float:
        text = json.dumps(PAYLOAD)
        connection = self._connect()
        started = time.perf_counter()
        for _ in range(count):
            connection.execute("BEGIN IMMEDIATE")
            connection.execute(
                "INSERT INTO plain (name, queue, state, payload, run_at) VALUES (?, ?, ?, ?, ?)",
                ("bench.noop", "default", "available", text, time.time_ns() // 1000),
            )
            connection.execute("COMMIT")
        rate = count / (time.perf_counter() - started)
        connection.close()
        return rate

    def baseline_bulk(self, count: int) -> float:
        text = json.dumps(PAYLOAD)
        connection = self._connect()
        started = time.perf_counter()
        connection.execute("BEGIN IMMEDIATE")
        connection.executemany(
            "INSERT INTO plain (name, queue, state, payload, run_at) VALUES (?, ?, ?, ?, ?)",
            [("bench.noop", "default", "available", text, 0) for _ in range(count)],
        )
        connection.execute("COMMIT")
        rate = count / (time.perf_counter() - started)
        connection.close()
        return rate

    def close(self) -> None:
        self.folder.cleanup()


def job() -> NewJob:
    return NewJob(name="bench.noop", payload=PAYLOAD)


async def fill(store: SqlStore, count: int) -> None:
    for start in range(0, count, 10_000):
        await store.job_insert([job() for _ in range(min(10_000, count - start))])


async def enqueue_single(store: SqlStore, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await store.job_insert([job()])
    return count / (time.perf_counter() - started)


async def enqueue_bulk(store: SqlStore, count: int) -> float:
    jobs = [job() for _ in range(count)]
    started = time.perf_counter()
    await store.job_insert(jobs)
    return count / (time.perf_counter() - started)


async def process(store: SqlStore, count: int, batch: int) -> float:
    """Claim and complete `count` jobs, `batch` per claim (one worker, no handler work)."""
    done = 0
    started = time.perf_counter()
    while done < count:
        claimed = await store.job_claim(
            JobClaim(queue="default", limit=batch, worker_id="bench", lease_seconds=30)
        )
        if not claimed:
            break
        await store.job_settle(
            [Settle(id=c.id, fence=c.fence, outcome="completed") for c in claimed]
        )
        done += len(claimed)
    return done / (time.perf_counter() - started)


Row = tuple[str, float, float | None]


async def one_run(backend: Backend, sizes: Sizes) -> list[Row]:
    """One pass over every measure; returns (measure, jobs/s, baseline jobs/s)."""
    store = await backend.store()
    rows: list[Row] = []
    try:
        await backend.reset(store)
        single_base = backend.baseline_single(sizes.singles)
        rows.append(
            ("enqueue one at a time", await enqueue_single(store, sizes.singles), single_base)
        )
        bulk_base = backend.baseline_bulk(sizes.bulk)
        rows.append(
            (f"enqueue {sizes.bulk:,} in bulk", await enqueue_bulk(store, sizes.bulk), bulk_base)
        )
        for backlog in (sizes.backlog_small, sizes.backlog_large):
            await backend.reset(store)
            await fill(store, backlog)
            for batch, count in ((1, sizes.process_batch1), (50, sizes.process_batch50)):
                rate = await process(store, count, batch)
                rows.append((f"claim+complete, batch {batch}, backlog {backlog:,}", rate, None))
    finally:
        await store.close()
    return rows


def report(backend: str, runs: list[list[Row]]) -> None:
    print(f"\n{backend}: median of {len(runs)} run(s), jobs/s")
    print(f"{'measure':<44} {'ket':>10} {'baseline':>10} {'ratio':>7}")
    for index, (measure, _, _) in enumerate(runs[0]):
        ket = statistics.median(run[index][1] for run in runs)
        bases = [run[index][2] for run in runs if run[index][2] is not None]
        base = statistics.median(bases) if bases else None
        ratio = f"{ket / base:7.2f}" if base else f"{'':>7}"
        base_text = f"{base:10,.0f}" if base else f"{'':>10}"
        print(f"{measure:<44} {ket:10,.0f} {base_text} {ratio}")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    makers: dict[str, Callable[[], Backend]] = {"postgresql": Postgres, "sqlite": Sqlite}
    names = list(makers) if args.backend == "both" else [args.backend]
    for name in names:
        backend = makers[name]()
        try:
            runs = [await one_run(backend, sizes) for _ in range(args.runs)]
        finally:
            backend.close()
        report(name, runs)


if __name__ == "__main__":
    asyncio.run(main())
