"""Faults on PostgreSQL: connections that die mid-operation lose no job and surface as StoreError
(never a raw driver error), the store and the tenant registry recover by themselves, and the
listener comes back by itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.exc import SQLAlchemyError

from ket.control.registry import Tenant, TenantRegistry
from ket.errors import StoreError
from ket.store import Heartbeat, JobClaim, JobQuery, Lease, NewJob, Prune, Settle
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore

Scenario = Callable[[SqlStore, ManualClock], Awaitable[None]]


def _tagged(postgres_url: str, schema: str) -> str:
    """The server URL with the test's schema as application name, which the store's LISTEN
    connection carries too: other processes may use the same database meanwhile."""
    url = make_url(postgres_url).update_query_dict({"application_name": schema})
    return url.render_as_string(hide_password=False)


def _run(postgres_url: str, schema: str, scenario: Scenario) -> None:
    async def main() -> None:
        clock = ManualClock()
        store = await SqlStore.open(
            _tagged(postgres_url, schema),
            clock=clock,
            migrate=True,
            connect_args={"options": f"-c search_path={schema}"},
        )
        try:
            await scenario(store, clock)
        finally:
            await store.close()

    asyncio.run(main())


def _kill_backends(postgres_url: str, schema: str, *, listener: bool = False) -> int:
    """Terminate the store's pooled connections (tagged with the schema), or its LISTEN one."""
    condition = "query LIKE 'LISTEN%%'" if listener else "query NOT LIKE 'LISTEN%%'"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND datname = current_database() "
            f"AND application_name = %s AND {condition}",
            (schema,),
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
                "AND datname = current_database() AND application_name = %s "
                "AND query LIKE 'LISTEN%%'",
                (postgres_schema,),
            ).fetchall()
        return int(count)

    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        others = [
            await SqlStore.open(
                _tagged(postgres_url, postgres_schema),
                connect_args={"options": f"-c search_path={postgres_schema}"},
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


def test_a_connection_killed_mid_statement_raises_store_error_and_the_store_recovers(
    postgres_url: str, postgres_schema: str
) -> None:
    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        await store.job_insert([NewJob(name="fault.before")])

        async def kill_soon() -> int:
            await asyncio.sleep(0.3)
            return await asyncio.to_thread(_kill_backends, postgres_url, postgres_schema)

        with pytest.raises(StoreError) as caught:
            async with store.transaction() as tx:
                await tx.job_insert([NewJob(name="fault.lost")])
                killer = asyncio.create_task(kill_soon())
                assert tx.connection is not None  # a SQL store's transaction has one
                # the caller's own statement, on the transaction's connection, dies mid-way
                await tx.connection.execute(text("SELECT pg_sleep(10)"))
        assert await killer >= 1
        assert isinstance(caught.value.__cause__, SQLAlchemyError), caught.value.__cause__
        assert "database error" in str(caught.value)
        await _recovered(store)
        names = sorted(r.name for r in await store.job_list(JobQuery()))
        assert names == ["fault.after", "fault.before"]  # the lost transaction left nothing

    _run(postgres_url, postgres_schema, scenario)


def test_every_operation_on_killed_connections_raises_only_store_error(
    postgres_url: str, postgres_schema: str
) -> None:
    async def scenario(store: SqlStore, clock: ManualClock) -> None:
        [inserted] = await store.job_insert([NewJob(name="fault.job")])
        claim = JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
        [claimed] = await store.job_claim(claim)
        operations: dict[str, Callable[[], Awaitable[object]]] = {
            "job_insert": lambda: store.job_insert([NewJob(name="fault.more")]),
            "job_claim": lambda: store.job_claim(claim),
            "job_heartbeat": lambda: store.job_heartbeat(
                Heartbeat(leases=[Lease(id=claimed.id, fence=claimed.fence)], lease_seconds=30)
            ),
            "job_rescue": store.job_rescue,
            "job_cancel": lambda: store.job_cancel(10**9),
            "job_retry": lambda: store.job_retry(inserted.id),
            "job_prune": lambda: store.job_prune(Prune(older_than_seconds=3600)),
            "schedule_get": lambda: store.schedule_get(["s"]),
            "job_list": lambda: store.job_list(JobQuery()),
            "job_stats": store.job_stats,
        }
        # several pooled connections, all of them killed: each operation meets a dead one
        for _ in range(3):
            await asyncio.gather(*(store.job_stats() for _ in range(4)))
            assert _kill_backends(postgres_url, postgres_schema) >= 1
            for name, operation in operations.items():
                try:
                    await operation()
                except StoreError as error:
                    assert error.__cause__ is not None, name
                # any other exception fails the test: nothing but StoreError may escape
        for operation in operations.values():  # and afterwards everything works
            await operation()

    _run(postgres_url, postgres_schema, scenario)


def test_a_registry_whose_connection_was_terminated_raises_store_error_then_works(
    postgres_url: str, postgres_schema: str
) -> None:
    url = make_url(postgres_url).update_query_dict(
        {"options": f"-c search_path={postgres_schema}", "application_name": postgres_schema}
    )
    registry = TenantRegistry(url.render_as_string(hide_password=False))
    try:
        registry.add("acme")
        assert registry.list() == [Tenant(name="acme")]
        assert _kill_backends(postgres_url, postgres_schema) == 1  # as a PostgreSQL restart does
        with pytest.raises(StoreError, match="database error") as caught:
            registry.list()
        assert isinstance(caught.value.__cause__, SQLAlchemyError)
        assert registry.list() == [Tenant(name="acme")]
    finally:
        registry.close()


async def _recovered(store: SqlStore) -> None:
    """The store works again within a few calls (the first ones may meet dead connections)."""
    for _ in range(3):
        try:
            await store.job_insert([NewJob(name="fault.after")])
            return
        except StoreError:
            continue
    pytest.fail("the store never recovered from killed connections")
