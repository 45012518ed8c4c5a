"""Engines (`ctx.db`, `ctx.tx`) under the process's connection budget, on a real server: a pool
whose connections are all back is idle, and gives its room to another tenant's engine."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest
import sqlalchemy

from ket.connection import budget
from ket.connection.engine import create_engine
from ket.store.record import checked_models
from ket.store.sql import SqlStore
from ket.store.sql.capabilities import session as store_module
from ket.store.types import ModelTable


def _backends(postgres_url: str, tag: str) -> int:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_engine_whose_connection_came_back_gives_its_room_to_another_engine(
    postgres_url: str,
) -> None:
    # A budget of 3 leaves engines one connection (the rest is the worker's reserve). Tenant a's
    # engine used one and gave it back: tenant b's engine must get one, by closing a's idle one.
    # An engine was never seen idle, so b waited forever: a worker of the example app, whose
    # handlers use ctx.db, served 18 tenants of 40 at a budget of 20 and wedged.
    tag = f"ket-engine-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        spent = budget.ConnectionBudget(3)
        budget.install(spent)
        options = {"connect_args": {"application_name": tag}}
        first = create_engine(postgres_url, pool_size=1, max_overflow=0, **options)
        second = create_engine(postgres_url, pool_size=1, max_overflow=0, **options)
        try:
            async with first.connect() as connection:
                await connection.execute(sqlalchemy.text("SELECT 1"))
            assert spent.open_count("engine") == 1
            async with asyncio.timeout(10):  # never, before: b waited for room that never came
                async with second.connect() as connection:
                    assert (await connection.execute(sqlalchemy.text("SELECT 2"))).scalar() == 2
            assert spent.open_count("engine") == 1
            assert await asyncio.to_thread(_backends, postgres_url, tag) == 1
            async with first.connect() as connection:  # and back: a takes b's idle one
                assert (await connection.execute(sqlalchemy.text("SELECT 3"))).scalar() == 3
        finally:
            await first.dispose()
            await second.dispose()
            budget.install(None)

    asyncio.run(body())


def test_handlers_waiting_for_their_own_pools_idle_connections_all_get_one(
    postgres_url: str,
) -> None:
    # The fault: at --max-connections 6 engines may hold 4; 8 handlers of one tenant
    # entered ctx.tx at once. 4 got a connection, 4 waited for room to open one more. When the
    # first 4 committed, their connections went back to the pool, idle, but the pool still
    # counted the 4 openings under way as checked out, so it was never seen idle: the 4 waited
    # until their jobs timed out (120 s) and spent an attempt.
    tag = f"ket-engine-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        spent = budget.ConnectionBudget(6)
        budget.install(spent)
        engine = create_engine(
            postgres_url, pool_size=16, max_overflow=0, connect_args={"application_name": tag}
        )

        async def handler(number: int) -> int:
            async with engine.begin() as connection:  # what ctx.tx does
                await asyncio.sleep(0.2)  # the handler's own work inside its transaction
                result = await connection.execute(sqlalchemy.text(f"SELECT {number}"))
                return int(result.scalar_one())

        try:
            async with asyncio.timeout(20):  # never, before: 4 of them waited for good
                done = await asyncio.gather(*[handler(n) for n in range(8)])
            assert done == list(range(8))
            assert spent.peak <= 6
            assert await asyncio.to_thread(_backends, postgres_url, tag) <= 4
        finally:
            await engine.dispose()
            budget.install(None)

    asyncio.run(body())


def test_a_stores_unused_engine_is_let_go_and_made_again_at_need(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker serving the example app's 1,000 tenants kept each one's engine after a single
    # ctx.db call (pool, dialect, compiled statements: about 50 KB each): it idled at 202 MB,
    # 163 MB once unused engines were let go.
    monkeypatch.setattr(store_module, "ENGINE_LINGER_SECONDS", 0.3)
    tag = f"ket-engine-{uuid.uuid4().hex[:8]}"
    name = f"shop{tag[-8:]}.Note"
    model = ModelTable(name=name, fields={"text": "string"})
    [checked] = checked_models([model])

    async def body() -> None:
        store = await SqlStore.open(
            postgres_url, pool_size=4, lane_size=2, connect_args={"application_name": tag}
        )
        try:
            await store.record_install([model])
            first = await store.record_insert(name, {"text": "one"})
            engine = store.engine
            async with store.transaction() as tx:  # a connection out: in use, however long
                await asyncio.sleep(0.8)
                await tx.record_insert(name, {"text": "two"})
            assert store.engine is engine
            for _ in range(100):
                await asyncio.sleep(0.05)
                if store._engines.made is None:
                    break
            assert store._engines.made is None  # let go once unused for its linger
            assert await asyncio.to_thread(_backends, postgres_url, tag) <= 2  # the lane's
            assert (await store.record_get(name, first) or {}).get("text") == "one"
            assert store._engines.made is not None and store._engines.made is not engine
        finally:
            await store.close()
            with psycopg.connect(postgres_url, autocommit=True) as admin:
                admin.execute(f"DROP TABLE IF EXISTS {checked.table}")
        assert await asyncio.to_thread(_backends, postgres_url, tag) == 0

    asyncio.run(body())
