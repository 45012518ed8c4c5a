"""PgQueuer: `pgq install`, `Queries.enqueue`, `pgq run`, and its `pgqueuer_log` table.

PgQueuer deletes a job's row when it completes; what stays is the log, one row per status
change, stamped by the database's `now()`: `picked` by the dequeue statement, `successful` by the
statement that settles a batch of completions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]  # no stubs ship with it
import psycopg
from database import Database, count
from executable import HERE, child_env, script
from ket_app import order
from peer_app import DSN_ENV, ENTRYPOINT
from pgqueuer import AsyncpgDriver, Queries
from pgqueuer.db import AsyncpgPoolDriver
from side import Command, Window

BEST_BATCH_SIZE = 200


def _payload(n: int) -> bytes:
    """The same order ket's jobs carry (ket_app.order), as the JSON bytes PgQueuer takes."""
    return json.dumps(order(n), separators=(",", ":")).encode()


class PeerProducer:
    """PgQueuer's Queries over one asyncpg connection."""

    def __init__(self, connection: asyncpg.Connection | asyncpg.Pool, queries: Queries) -> None:
        self._connection = connection
        self._queries = queries
        self._sent = 0

    async def enqueue_one(self) -> int:
        self._sent += 1
        [job_id] = await self._queries.enqueue(ENTRYPOINT, _payload(self._sent))
        return int(job_id)

    async def enqueue_all(self, jobs: int) -> None:
        payloads = [_payload(n) for n in range(jobs)]
        await self._queries.enqueue([ENTRYPOINT] * jobs, payloads, [0] * jobs)

    async def close(self) -> None:
        await self._connection.close()


class PeerSide:
    name = "PgQueuer"
    best_label = f"--batch-size {BEST_BATCH_SIZE}"

    def install(self, database: Database, folder: Path) -> None:
        argv = [script("pgq"), "--pg-dsn", database.url, "install"]
        subprocess.run(argv, env=child_env({}), cwd=folder, check=True, capture_output=True)

    async def producer(self, database: Database, *, concurrency: int = 1) -> PeerProducer:
        if concurrency > 1:  # one asyncpg connection runs one query at a time: a pool
            pool = await asyncpg.create_pool(
                database.url, min_size=concurrency, max_size=concurrency
            )
            return PeerProducer(pool, Queries(AsyncpgPoolDriver(pool)))
        connection = await asyncpg.connect(database.url)
        return PeerProducer(connection, Queries(AsyncpgDriver(connection)))

    def worker(self, database: Database, folder: Path, *, best: bool) -> Command:
        # pgq_cli.py is `pgq` with one start-up crash of 1.6.0 under typer 0.29 taken out
        argv = [sys.executable, str(HERE / "pgq_cli.py"), "run", "peer_app:create"]
        if best:
            argv += ["--batch-size", str(BEST_BATCH_SIZE)]
        return Command(argv=argv, env={DSN_ENV: database.url})

    def queued(self, connection: psycopg.Connection) -> int:
        return count(connection, "SELECT count(*) FROM pgqueuer WHERE status = 'queued'")

    def finished(self, connection: psycopg.Connection) -> int:
        return count(connection, "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'")

    def window(self, connection: psycopg.Connection) -> Window:
        row = connection.execute(
            "SELECT extract(epoch FROM min(created) FILTER (WHERE status = 'picked')),"
            " extract(epoch FROM min(created) FILTER (WHERE status = 'successful')),"
            " extract(epoch FROM max(created) FILTER (WHERE status = 'successful'))"
            " FROM pgqueuer_log"
        ).fetchone()
        assert row is not None
        return Window(
            first_claim=float(row[0]), first_finish=float(row[1]), last_finish=float(row[2])
        )

    def verify(self, connection: psycopg.Connection, jobs: int) -> None:
        row = connection.execute(
            "SELECT count(*) FILTER (WHERE status = 'queued'),"
            " count(*) FILTER (WHERE status = 'picked'),"
            " count(*) FILTER (WHERE status = 'successful'),"
            " count(DISTINCT job_id) FILTER (WHERE status = 'successful'),"
            " count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful'))"
            " FROM pgqueuer_log"
        ).fetchone()
        left = count(connection, "SELECT count(*) FROM pgqueuer")
        # one pick per job: a job picked twice (a stale re-pick) ran twice
        if row != (jobs, jobs, jobs, jobs, 0) or left:
            raise RuntimeError(
                f"PgQueuer: expected {jobs} jobs each queued, picked and successful once, found "
                f"(queued, picked, successful, distinct successful, other) = {row}, "
                f"{left} rows left in pgqueuer"
            )
