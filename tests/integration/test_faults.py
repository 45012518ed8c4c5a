"""Faults on PostgreSQL: connections that die mid-operation lose no job, and the listener comes
back by itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg
import pytest

from ket.errors import StoreError
from ket.store import JobClaim, JobQuery, NewJob, Settle
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore

Scenario = Callable[[SqlStore, ManualClock], Awaitable[None]]


def _run(postgres_url: str, schema: str, scenario: Scenario) -> None:
    async def main() -> None:
        clock = ManualClock()
        store = await SqlStore.open(
            postgres_url,
            clock=clock,
            migrate=True,
            connect_args={"options": f"-c search_path={schema}", "application_name": schema},
        )
        try:
            await scenario(store, clock)
        finally:
            await store.close()

    asyncio.run(main())


def _kill_backends(postgres_url: str, schema: str, *, listener: bool = False) -> int:
    """Terminate the store's pooled connections (tagged with the schema), or its LISTEN one."""
    condition = "query LIKE 'LISTEN%%'" if listener else "application_name = %s"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE pid <> pg_backend_pid() AND datname = current_database() AND {condition}",
            () if listener else (schema,),
        ).fetchall()
    return len(rows)


def test_a_claim_whose_settle_never_arrives_is_rescued_and_runs_again(
    postgres_url: str, postgres_schema: str
) -> None:
    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        [inserted] = await store.job_insert([NewJob(name="fault.job")])
        [claimed] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="doomed", lease_seconds=30)
        )
        # the worker's connections die before it can report the outcome
        assert _kill_backends(postgres_url, postgres_schema) >= 1
        outcome: StoreError | None = None
        try:
            await store.job_settle(
                [Settle(id=claimed.id, fence=claimed.fence, outcome="completed")]
            )
        except StoreError as error:  # the pooled connection was dead: nothing was written
            outcome = error
        records = {r.id: r for r in await store.job_list(JobQuery())}
        if outcome is not None:
            assert records[inserted.id].state == "executing"
            clock.advance(seconds=31)
            [rescued] = await store.job_rescue()
            assert (rescued.id, rescued.state) == (inserted.id, "retryable")
            [again] = await store.job_claim(
                JobClaim(queue="default", limit=1, worker_id="next", lease_seconds=30)
            )
            assert again.id == inserted.id
            assert again.fence == claimed.fence + 1
            late = await store.job_settle(
                [Settle(id=claimed.id, fence=claimed.fence, outcome="completed")]
            )
            assert late.refused == (inserted.id,)
        else:  # the pool noticed the dead connection and the settle went through on a new one
            assert records[inserted.id].state == "completed"

    _run(postgres_url, postgres_schema, scenario)


def test_the_store_recovers_after_its_connections_are_killed(
    postgres_url: str, postgres_schema: str
) -> None:
    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        await store.job_insert([NewJob(name="fault.before")])
        _kill_backends(postgres_url, postgres_schema)
        for _ in range(3):  # the first use may meet the dead connection; later ones must work
            try:
                await store.job_insert([NewJob(name="fault.after")])
                break
            except StoreError:
                continue
        else:
            pytest.fail("the store never recovered from killed connections")
        names = sorted(r.name for r in await store.job_list(JobQuery()))
        assert names == ["fault.after", "fault.before"]

    _run(postgres_url, postgres_schema, scenario)


def test_the_listener_reconnects_and_wakes_waiters_again(
    postgres_url: str, postgres_schema: str
) -> None:
    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        assert await store.wait_for_jobs(["quiet"], 0.2) is False  # listener is up, nothing sent
        assert _kill_backends(postgres_url, postgres_schema, listener=True) == 1
        # after the reconnect every waiter is woken once (whatever was sent meanwhile is lost)
        assert await store.wait_for_jobs(["quiet"], 5.0) is True
        # and NOTIFY from another process's insert reaches it again
        waiter = asyncio.create_task(store.wait_for_jobs(["mail"], 5.0))
        await asyncio.sleep(0.1)
        with psycopg.connect(
            postgres_url, autocommit=True, options=f"-c search_path={postgres_schema}"
        ) as other:
            other.execute(
                "INSERT INTO ket_jobs (name, queue, state, priority, payload, payload_version, "
                "attempt, max_attempts, run_at, enqueued_at, fence, cancel_requested) VALUES "
                "('other.job', 'mail', 'available', 0, '{}', 1, 0, 20, now(), now(), 0, false)"
            )
        assert await waiter is True

    _run(postgres_url, postgres_schema, scenario)


def test_handles_on_one_database_share_one_listen_connection(
    postgres_url: str, postgres_schema: str
) -> None:
    def listeners() -> int:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            [(count,)] = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                "AND datname = current_database() AND query LIKE 'LISTEN%%'"
            ).fetchall()
        return int(count)

    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        others = [
            await SqlStore.open(
                postgres_url, connect_args={"options": f"-c search_path={postgres_schema}"}
            )
            for _ in range(3)
        ]
        for handle in [store, *others]:
            assert await handle.wait_for_jobs(["quiet"], 0.05) is False
        assert listeners() == 1
        for handle in others:
            await handle.close()
        assert listeners() == 1  # still in use by the first handle
        assert await store.wait_for_jobs(["quiet"], 0.05) is False

    _run(postgres_url, postgres_schema, scenario)
