"""The PostgreSQL lane's pool, on a real server: its bound, its queue of waiters, its timeout,
and what it does with connections the server killed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from sqlalchemy.engine import make_url

from ket.errors import StoreError
from ket.store.sql.lane import Lane


def _lane(postgres_url: str, tag: str, *, size: int, timeout: float = 5.0) -> Lane:
    return Lane(
        make_url(postgres_url),
        size=size,
        timeout=timeout,
        connect_args={"application_name": tag},
    )


def _open_backends(postgres_url: str, tag: str) -> int:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _kill(postgres_url: str, tag: str) -> int:
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (tag,),
        ).fetchall()
    return len(rows)


def _run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(body())


def test_the_lane_never_opens_more_connections_than_its_size_and_serves_every_waiter(
    postgres_url: str,
) -> None:
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=3)
        in_use = 0
        most = 0

        async def work(n: int) -> int:
            nonlocal in_use, most
            async with lane.connection() as connection:
                in_use += 1
                most = max(most, in_use)
                cursor = await connection.raw.execute("SELECT %s::int, pg_sleep(0.02)", (n,))
                row = await cursor.fetchone()
                in_use -= 1
                assert row is not None
                return int(row[0])

        results = await asyncio.gather(*[work(n) for n in range(30)])
        assert results == list(range(30))
        assert most == 3
        assert await asyncio.to_thread(_open_backends, postgres_url, tag) == 3
        await lane.close()  # returns once the server processes are gone
        assert await asyncio.to_thread(_open_backends, postgres_url, tag) == 0

    _run(body)


def test_a_shed_connection_is_gone_from_the_server_when_shed_returns(postgres_url: str) -> None:
    # the budget takes the room of a shed connection at once: had its server process not yet
    # exited, the server would count one connection more than the budget allows
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=1)
        seen = []
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
            for _ in range(20):
                async with lane.connection() as connection:
                    await connection.raw.execute("SELECT 1")
                assert await lane.shed() == 1
                cursor = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
                )
                seen.append((await cursor.fetchone() or (None,))[0])
        assert seen == [0] * 20
        await lane.close()

    _run(body)


def test_a_caller_that_finds_no_free_connection_in_time_gets_a_store_error_naming_the_pool(
    postgres_url: str,
) -> None:
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=1, timeout=0.2)
        async with lane.connection():
            with pytest.raises(StoreError) as caught:
                async with lane.connection():
                    pass
        assert str(caught.value) == (
            "no database connection free within 0.2 s (pool of 1): every connection is in use; "
            "hold them for less time, or raise pool_size"
        )
        assert isinstance(caught.value.__cause__, TimeoutError)
        # the connection that was held serves the next caller
        async with lane.connection() as connection:
            await connection.raw.execute("SELECT 1")
        await lane.close()

    _run(body)


def test_connections_the_server_killed_are_dropped_and_the_next_call_gets_a_new_one(
    postgres_url: str,
) -> None:
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=3)

        async def hold_three() -> None:
            async def one() -> None:
                async with lane.connection() as connection:
                    await connection.raw.execute("SELECT pg_sleep(0.05)")

            await asyncio.gather(one(), one(), one())

        await hold_three()  # three idle connections now
        assert await asyncio.to_thread(_kill, postgres_url, tag) == 3
        with pytest.raises(psycopg.OperationalError):
            async with lane.connection() as connection:
                await connection.raw.execute("SELECT 1")
        # the lost connection took the idle ones with it: the next call connects afresh
        async with lane.connection() as connection:
            cursor = await connection.raw.execute("SELECT 42")
            assert await cursor.fetchone() == (42,)
        assert await asyncio.to_thread(_open_backends, postgres_url, tag) == 1
        await lane.close()

    _run(body)


def test_a_transaction_left_open_by_a_cancelled_caller_never_reaches_the_next_one(
    postgres_url: str,
) -> None:
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=1)

        async def stuck() -> None:
            async with lane.connection() as connection:
                await connection.raw.execute("BEGIN")
                await connection.raw.execute("SELECT pg_sleep(10)")

        task = asyncio.ensure_future(stuck())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        async with lane.connection() as connection:
            assert connection.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            cursor = await connection.raw.execute("SELECT 1")
            assert await cursor.fetchone() == (1,)
        await lane.close()

    _run(body)
