"""`job_stats` tells an operator what keeps the jobs table from being vacuumed (PostgreSQL)."""

from __future__ import annotations

import asyncio
import time

import psycopg

from ket.store import NewJob
from ket.store.sql import SqlStore


async def _stats(url: str, long_after: float) -> object:
    store = await SqlStore.open(url)
    try:
        await store.job_insert([NewJob(name="t.work") for _ in range(50)])
        return await store.job_stats(long_after=long_after)
    finally:
        await store.close()


def test_stats_count_dead_rows_and_name_a_transaction_held_open(tenant_database: str) -> None:
    if tenant_database.startswith("sqlite"):
        stats = asyncio.run(_stats(tenant_database, 0.0))
        assert (stats.dead_rows, stats.live_rows, stats.long_transactions) == (None, None, ())  # type: ignore[attr-defined]
        return
    with psycopg.connect(tenant_database, application_name="held-open") as holder:
        holder.execute("SELECT 1")  # a transaction begins, and stays open
        time.sleep(0.3)
        with psycopg.connect(tenant_database, autocommit=True) as writer:
            writer.execute(
                "INSERT INTO ket_jobs (name, queue, state, payload, payload_version, "
                "priority, attempt, max_attempts, run_at, enqueued_at, fence, "
                "cancel_requested) SELECT 't.x', 'default', 'completed', '{}', 1, 0, 0, "
                "1, now(), now(), 0, false FROM generate_series(1, 20)"
            )
            writer.execute("DELETE FROM ket_jobs WHERE name = 't.x'")
            writer.execute("SELECT pg_stat_force_next_flush()")
        stats = asyncio.run(_stats(tenant_database, 0.2))
        held = [t for t in stats.long_transactions if t.application == "held-open"]  # type: ignore[attr-defined]
        assert len(held) == 1
        assert held[0].pid == holder.info.backend_pid
        assert held[0].state == "idle in transaction"
        assert held[0].seconds >= 0.2
        assert stats.dead_rows is not None and stats.dead_rows >= 20  # type: ignore[attr-defined]
        holder.rollback()
