"""The conformance kit on the SQL store over PostgreSQL (a fresh schema per test), and what the
kit cannot see from one process: NOTIFY reaching other processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg import sql

from ket.store import JobClaim, NewJob, Settle
from ket.store.clock import Clock, ManualClock
from ket.store.sql import SqlStore
from ket.tck import *  # noqa: F403
from ket.tck import Outage
from tests.databases import drop_database
from tests.tck.starved import open_starved


class PostgresFactory:
    """Handles on one schema of the test server; every handle has its own connection pool.

    Also a FaultyStoreFactory: its faulty handle has one connection, which the outage holds.
    """

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.migrated = False

    async def open(self, clock: Clock | None) -> SqlStore:
        store = await SqlStore.open(
            self.url,
            clock=clock,
            migrate=not self.migrated,
            connect_args={"options": f"-c search_path={self.schema}"},
        )
        self.migrated = True
        return store

    async def open_faulty(self, clock: Clock | None) -> tuple[SqlStore, Outage]:
        options = {"options": f"-c search_path={self.schema}"}
        return await open_starved(self.url, clock, connect_args=options)

    async def cleanup(self) -> None:
        pass  # the ket_store_factory fixture drops the schema


@pytest.fixture(scope="session")
def kit_database(postgres_url: str, worker_id: str) -> Iterator[str]:
    """A database of this test process's own for the kit's schemas. NOTIFY reaches every
    session of a database, whatever its schema: in the shared one, another test's jobs in
    queue `mail` woke the kit's waiters while it asserted that nobody wakes them."""
    name = f"ket_kit_{worker_id}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        drop_database(postgres_url, name)


@pytest.fixture
def ket_store_factory(kit_database: str) -> Iterator[PostgresFactory]:
    schema = f"ket_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(kit_database, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield PostgresFactory(kit_database, schema)
    finally:
        with psycopg.connect(kit_database, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


# -- beyond the kit ------------------------------------------------------------------------------
# The kit's waiters share the in-process wake-ups of the handle that changed the work, so on
# PostgreSQL it cannot tell whether NOTIFY went out; a worker in another process relies on it.

HEARD_WITHIN = 0.3  # NOTIFY arrives at commit; this is how long a listener waits for it


def test_notify_goes_out_once_per_queue_for_every_change_that_makes_work_claimable_now(
    postgres_url: str, postgres_schema: str
) -> None:
    async def main() -> None:
        clock = ManualClock(datetime(2030, 1, 15, 12, 0, tzinfo=UTC))
        store = await SqlStore.open(
            postgres_url,
            clock=clock,
            migrate=True,
            connect_args={"options": f"-c search_path={postgres_schema}"},
        )
        other_process = await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)
        queue = f"notify-{uuid.uuid4().hex[:8]}"

        async def heard() -> int:
            """NOTIFYs for this test's queue since the last call."""
            count = 0
            async for notification in other_process.notifies(timeout=HEARD_WITHIN):
                count += notification.payload == queue
            return count

        async def claim() -> list[Settle]:
            params = JobClaim(queue=queue, limit=10, worker_id="w", lease_seconds=30)
            jobs = await store.job_claim(params)
            return [Settle(id=j.id, fence=j.fence, outcome="completed") for j in jobs]

        try:
            await other_process.execute("LISTEN ket_jobs")
            await store.job_insert([NewJob(name="n", queue=queue) for _ in range(3)])
            assert await heard() == 1  # the insert trigger
            a, b, c = await claim()
            assert await heard() == 0
            handed_back = Settle(id=a.id, fence=a.fence, outcome="snoozed")
            failed = Settle(id=b.id, fence=b.fence, outcome="retryable")
            await store.job_settle([handed_back, failed])
            assert await heard() == 1  # two jobs of one queue, one transaction: one NOTIFY
            await store.job_settle([c])
            assert await heard() == 0  # a completion makes nothing claimable
            a, b = await claim()
            later = [
                Settle(id=a.id, fence=a.fence, outcome="retryable", delay_seconds=3_600),
                Settle(id=b.id, fence=b.fence, outcome="snoozed", delay_seconds=60),
            ]
            await store.job_settle(later)
            assert await heard() == 0  # not claimable now: polling finds them when due
            change = await store.job_retry(a.id)
            assert change.state == "available", change
            assert await heard() == 1  # the operator's retry
            clock.advance(seconds=61)
            assert len(await claim()) == 2
            clock.advance(seconds=31)
            assert {r.state for r in await store.job_rescue()} == {"retryable"}
            assert await heard() == 1  # the rescue of both expired leases
        finally:
            await other_process.close()
            await store.close()

    asyncio.run(main())
