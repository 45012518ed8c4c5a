"""VACUUM of the jobs table on a real PostgreSQL: it takes the claimed jobs' index entries out of
the claim's way, and a role that may not vacuum is told so instead of silently doing nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ket.store import JobClaim, NewJob, Settle, Vacuum
from ket.store.sql import SqlStore
from ket.store.sql import statement as stmt
from ket.store.sql.lane import text_of
from ket.store.sql.now import time_params
from tests.conftest import REQUIRED
from tests.databases import drop_database

ALWAYS = Vacuum(threshold=0, scale_factor=0)


def _on_schema(schema: str) -> dict[str, Any]:
    return {"connect_args": {"options": f"-c search_path={schema}"}}


def _claim_buffers(url: str, schema: str) -> int:
    """Index pages of `ket_jobs_runnable` that one 10-job claim of queue q reads (rolled back):
    the claim runs as the store's lane runs it (a function's statements, which EXPLAIN does
    not show), and the transaction's own count of the index's blocks says what it read."""
    claim = text_of(stmt.CLAIM)
    params = claim.params(
        {**time_params(None, lease=30.0), "p_queue": "q", "limit": 10, "p_worker_id": "probe"}
    )
    with psycopg.connect(url, options=f"-c search_path={schema}") as connection:
        claimed = connection.execute(claim.text, params).fetchall()
        row = connection.execute(
            "SELECT pg_stat_get_xact_blocks_fetched('ket_jobs_runnable'::regclass)"
        ).fetchone()
        connection.rollback()
    assert len(claimed) == 10 and row is not None
    return int(row[0])


def _vacuums(url: str, schema: str) -> int:
    with psycopg.connect(url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT vacuum_count FROM pg_stat_all_tables "
            "WHERE schemaname = %s AND relname = 'ket_jobs'",
            (schema,),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _drain(store: SqlStore, jobs: int) -> None:
    """Claim and complete `jobs` jobs of queue q, 100 at a time."""
    for _ in range(jobs // 100):
        claimed = await store.job_claim(
            JobClaim(queue="q", limit=100, worker_id="w", lease_seconds=30)
        )
        assert len(claimed) == 100
        await store.job_settle(
            [Settle(id=job.id, fence=job.fence, outcome="completed") for job in claimed]
        )


@pytest.fixture
def alone(postgres_url: str) -> Iterator[str]:
    """A database of this test's own: VACUUM removes only rows no snapshot can still see, and
    any transaction of another test in a shared database would keep the dead entries alive."""
    name = f"ket_vacuum_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{postgres_url.rsplit('/', 1)[0]}/{name}"
    finally:
        drop_database(postgres_url, name)


def test_a_vacuum_takes_the_claimed_jobs_index_entries_out_of_the_claims_way(alone: str) -> None:
    async def main() -> None:
        store = await SqlStore.open(alone, migrate=True)
        try:
            await store.job_insert([NewJob(name="j", queue="q") for _ in range(6_000)])
            await _drain(store, 5_000)
            walked = _claim_buffers(alone, "public")
            result = await store.job_vacuum(ALWAYS)
            assert result.outcome == "vacuumed"
            cleared = _claim_buffers(alone, "public")
            # 5,000 dead entries fill some 35 index pages; once gone, the claim reads 2 or 3
            assert walked >= 15
            assert cleared * 3 <= walked, (walked, cleared)
            assert _vacuums(alone, "public") == 1
            left = await store.job_claim(
                JobClaim(queue="q", limit=2_000, worker_id="w", lease_seconds=30)
            )
            assert len(left) == 1_000
        finally:
            await store.close()

    asyncio.run(main())


@pytest.fixture
def stranger(postgres_url: str, postgres_schema: str) -> Iterator[str]:
    """The URL of a role that may use ket's tables in the schema but owns nothing."""
    role = f"ket_stranger_{uuid.uuid4().hex[:8]}"
    identifier = sql.Identifier(role)
    schema = sql.Identifier(postgres_schema)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(identifier))
        for grant in (
            "GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
            "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        ):
            admin.execute(sql.SQL(grant).format(schema=schema, role=identifier))
    try:
        yield postgres_url.replace("://root@", f"://{role}@", 1)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(identifier))
            admin.execute(sql.SQL("DROP ROLE {}").format(identifier))


def test_a_role_owning_neither_the_table_nor_the_database_is_not_permitted_to_vacuum(
    postgres_url: str, postgres_schema: str, request: pytest.FixtureRequest
) -> None:
    if "://root@" not in postgres_url:  # CI runs as root: there it must run, not skip
        message = "needs the test server's superuser `root` to create a role"
        if REQUIRED:
            pytest.fail(f"KET_REQUIRE_POSTGRES=1 but this test {message}")
        pytest.skip(message)

    async def migrate() -> None:
        owner = await SqlStore.open(postgres_url, migrate=True, **_on_schema(postgres_schema))
        await owner.close()

    async def main(url: str) -> None:
        store = await SqlStore.open(url, **_on_schema(postgres_schema))
        try:
            await store.job_insert([NewJob(name="j", queue="q") for _ in range(300)])
            await _drain(store, 300)
            result = await store.job_vacuum(ALWAYS)
            assert result.outcome == "not_permitted"
        finally:
            await store.close()

    asyncio.run(migrate())
    asyncio.run(main(request.getfixturevalue("stranger")))  # granted the tables made above
    assert _vacuums(postgres_url, postgres_schema) == 0
