"""The PostgreSQL lane's pool, on a real server: its bound, its queue of waiters, its timeout,
and what it does with connections the server killed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ket.connection import budget
from ket.connection.address import parse_url
from ket.errors import StoreError
from ket.store.sql.lane import OWN_WAIT_SECONDS, Lane
from ket.store.waiting import Sent, sending, unsent
from tests.databases import drop_database


def _lane(postgres_url: str, tag: str, *, size: int, timeout: float = 5.0) -> Lane:
    return Lane(
        parse_url(postgres_url),  # as SqlStore.open reads it before making its lane
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


def _run(body: Callable[[], Coroutine[Any, Any, None]]) -> None:
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


async def _backend(lane: Lane, sleep: float = 0.0, *, lasting: bool = False) -> int:
    """The server process that ran a statement on `lane` (sleeping `sleep` seconds first)."""

    async def body(connection: Any) -> int:
        cursor = await connection.raw.execute(
            "SELECT pg_backend_pid() FROM pg_sleep(%s::float)", (sleep,)
        )
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    return await lane.run(body, single=True, lasting=lasting)


@pytest.fixture(scope="module")
def elsewhere(postgres_url: str) -> Iterator[str]:
    """A database of these tests' own: a statement that sleeps holds a snapshot, which in the
    other tests' database would keep their VACUUM from removing dead rows."""
    name = f"ket_lane_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{postgres_url.rsplit('/', 1)[0]}/{name}"
    finally:
        drop_database(postgres_url, name)


async def _while_busy(
    server: str, elsewhere: str, tag: str, busy_seconds: float, *, lasting: bool = False
) -> tuple[int, int, float, int]:
    """With a budget of 3 spent (two idle connections of another lane, a tenant that just
    finished: what a caller opens now must close one of those first), a lane runs a statement
    of `busy_seconds`, and 0.1 s later a short one: the server processes of both, how long the
    short one took, and how many connections the other lane still has on the server then."""
    budget.install(budget.ConnectionBudget(3))
    others = _lane(elsewhere, f"{tag}-others", size=2)
    lane = _lane(elsewhere, tag, size=3)
    try:
        await asyncio.gather(_backend(others, 0.05), _backend(others, 0.05))
        busy = asyncio.ensure_future(_backend(lane, busy_seconds, lasting=lasting))
        await asyncio.sleep(0.1)  # the busy statement runs
        began = time.monotonic()
        short = await _backend(lane)
        waited = time.monotonic() - began
        others_open = await asyncio.to_thread(_open_backends, server, f"{tag}-others")
        return await busy, short, waited, others_open
    finally:
        await lane.close()
        await others.close()
        budget.install(None)


def test_with_the_budget_spent_a_lane_waits_for_its_own_busy_connection_not_a_new_one(
    postgres_url: str, elsewhere: str
) -> None:
    """After a tick, a tenant's claim comes while its sweep's statement still runs: it takes
    the sweep's connection a moment later rather than closing another tenant's to open one."""
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"
    first, second, _, others_open = asyncio.run(_while_busy(postgres_url, elsewhere, tag, 0.3))
    assert second == first  # the same server process: no connection was opened for it
    assert others_open == 2  # and the other tenant's idle connections were left alone


def test_a_lane_does_not_wait_for_its_connection_held_by_a_lasting_statement(
    postgres_url: str, elsewhere: str
) -> None:
    """A VACUUM holds the tenant's connection: its claims and settlements open their own at
    once, rather than waiting OWN_WAIT_SECONDS for it."""
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"
    lasting, short, waited, _ = asyncio.run(
        _while_busy(postgres_url, elsewhere, tag, 1.5, lasting=True)
    )
    assert short != lasting
    assert waited < OWN_WAIT_SECONDS / 2


def test_a_lane_waits_for_its_own_connection_only_so_long_then_opens_one(
    postgres_url: str, elsewhere: str
) -> None:
    """A statement that turns out long (a lock wait, say) holds the others up by at most
    OWN_WAIT_SECONDS."""
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"
    slow, quick, waited, _ = asyncio.run(
        _while_busy(postgres_url, elsewhere, tag, OWN_WAIT_SECONDS + 2.0)
    )
    assert quick != slow
    assert OWN_WAIT_SECONDS <= waited < OWN_WAIT_SECONDS + 1.5


def test_a_caller_cancelled_as_a_connection_is_handed_to_it_ends_cancelled(
    postgres_url: str,
) -> None:
    # asyncio.wait_for (Python 3.11) returned the connection to a waiter cancelled in that very
    # moment, and the caller went on as if never cancelled: a worker's claim loop did so at its
    # stop, then waited minutes for work (the budget grid's 200 tenants at budget 4)
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def body() -> None:
        lane = _lane(postgres_url, tag, size=1)
        go = asyncio.Event()
        ran: list[str] = []

        async def holds(connection: Any) -> None:
            await go.wait()

        async def second(connection: Any) -> None:
            ran.append("second")

        first = asyncio.ensure_future(lane.run(holds, single=True))
        while not lane._open:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # it holds the lane's one connection
        waiting = asyncio.ensure_future(lane.run(second, single=True))
        await asyncio.sleep(0.05)
        [handed] = lane._waiters
        requested: list[bool] = []
        # cancelled right as the connection is handed over, before the waiter runs again
        handed.add_done_callback(lambda _: requested.append(waiting.cancel()))
        go.set()
        await first
        await asyncio.wait([waiting])
        assert requested
        if requested[0]:  # the cancel was taken: the caller ends cancelled, its body not run
            assert waiting.cancelled() and ran == []
        assert lane.idle_since() is not None  # and the connection is back in the pool
        await lane.close()

    _run(body)


def test_a_statement_that_waited_for_room_is_sent_when_its_connection_is_in_hand(
    postgres_url: str, elsewhere: str
) -> None:
    """A heartbeat or claim that waits a second for room in a spent budget renews or takes its
    leases when its connection is in hand, not when it asked: the worker counts them from then
    (store/waiting.py's Sent), so a wait that was not the database's costs them nothing."""
    tag = f"ket-lane-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[float, float, bool]:
        budget.install(budget.ConnectionBudget(3))
        holders = [_lane(elsewhere, f"{tag}-holder-{n}", size=1) for n in range(3)]
        lane = _lane(elsewhere, tag, size=1)
        try:
            # three statements of 1 s take the whole budget: the fourth waits for one to end
            busy = [asyncio.ensure_future(_backend(h, 1.0)) for h in holders]
            await asyncio.sleep(0.2)
            sent = Sent(time.monotonic)
            asked = sent.at
            token = sending(sent)
            try:
                await _backend(lane)
            finally:
                unsent(token)
            await asyncio.gather(*busy)
            after = Sent(time.monotonic)
            token = sending(after)
            try:
                await _backend(lane)  # no wait: in hand at once, moved a moment later
            finally:
                unsent(token)
            return sent.at - asked, after.at - time.monotonic(), after.moved
        finally:
            await lane.close()
            for holder in holders:
                await holder.close()
            budget.install(None)

    waited, since_now, moved = asyncio.run(scenario())
    assert 0.6 <= waited <= 2.0  # the 0.8 s it waited for room is not counted against it
    assert moved and since_now <= 0
