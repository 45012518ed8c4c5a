"""A batch of jobs on PostgreSQL is one statement of arrays: its rows keep the batch's order and
every field, the database's clock stamps them, unique keys in it still coalesce, and the
wake-up trigger still sends one NOTIFY per queue that got work runnable at once."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from ket.store import JobQuery, NewJob
from ket.store.sql import SqlStore
from ket.store.sql.insert import CHANNEL


@pytest.fixture
def store_args(postgres_schema: str, postgres_url: str) -> tuple[str, dict[str, str]]:
    args = {"options": f"-c search_path={postgres_schema}"}

    async def migrate() -> None:
        store = await SqlStore.open(postgres_url, migrate=True, connect_args=args)
        await store.close()

    asyncio.run(migrate())
    return postgres_url, args


async def _insert(url: str, args: dict[str, str], batch: list[NewJob]) -> list[Any]:
    store = await SqlStore.open(url, connect_args=args)
    try:
        inserted = await store.job_insert(batch)
        records = {r.id: r for r in await store.job_list(JobQuery(limit=1_000))}
        return [(i, records[i.id]) for i in inserted]
    finally:
        await store.close()


def test_a_batch_keeps_its_order_and_every_field_on_the_databases_clock(
    store_args: tuple[str, dict[str, str]],
) -> None:
    url, args = store_args
    later = datetime.now(UTC) + timedelta(hours=1)
    tick = datetime(2030, 1, 15, 11, 0, tzinfo=UTC)
    batch = [
        NewJob(name="bulk.a", payload={"n": 0}),
        NewJob(
            name="bulk.b",
            queue="reports",
            payload={"n": 1, "text": "Grüße"},
            payload_version=2,
            run_at=later,
            priority=-3,
            max_attempts=4,
            company="acme",
            tick=tick,
            ticks_skipped=2,
        ),
        NewJob(name="bulk.c", payload={"n": 2}),
    ]
    before = datetime.now(UTC) - timedelta(seconds=5)  # the server's clock may differ a little
    rows = asyncio.run(_insert(url, args, batch))
    assert [r.name for _, r in rows] == ["bulk.a", "bulk.b", "bulk.c"]
    assert [r.payload["n"] for _, r in rows] == [0, 1, 2]
    assert [r.state for _, r in rows] == ["available", "scheduled", "available"]
    assert not any(i.coalesced for i, _ in rows)
    first, second, third = (r for _, r in rows)
    assert first.id < second.id < third.id
    assert (second.queue, second.payload, second.payload_version) == (
        "reports",
        {"n": 1, "text": "Grüße"},
        2,
    )
    assert (second.priority, second.max_attempts, second.company) == (-3, 4, "acme")
    assert (second.run_at, second.tick, second.ticks_skipped) == (later, tick, 2)
    assert (first.attempt, first.run_at) == (0, first.enqueued_at)
    assert first.enqueued_at == second.enqueued_at == third.enqueued_at  # one statement's now
    assert first.enqueued_at > before


def test_unique_keys_in_a_batch_coalesce_with_an_active_holder_and_with_each_other(
    store_args: tuple[str, dict[str, str]],
) -> None:
    url, args = store_args
    [(held, _)] = asyncio.run(_insert(url, args, [NewJob(name="bulk.u", unique_key="k-1")]))
    batch = [
        NewJob(name="bulk.plain", payload={"n": 0}),
        NewJob(name="bulk.u", unique_key="k-1"),
        NewJob(name="bulk.u", unique_key="k-2"),
        NewJob(name="bulk.plain", payload={"n": 1}),
        NewJob(name="bulk.u", unique_key="k-2"),
    ]
    rows = asyncio.run(_insert(url, args, batch))
    results = [i for i, _ in rows]
    assert [i.coalesced for i in results] == [False, True, False, False, True]
    assert results[1].id == held.id
    assert results[4].id == results[2].id
    assert [r.payload.get("n") for _, r in rows] == [0, None, None, 1, None]


def test_a_batch_sends_one_wake_up_per_queue_with_work_runnable_at_once(
    store_args: tuple[str, dict[str, str]],
) -> None:
    url, args = store_args
    # queues of this test's own: other tests on this database send on the same channel
    mail, sms, later = (f"q{secrets.token_hex(4)}" for _ in range(3))
    future = datetime.now(UTC) + timedelta(hours=1)
    batch = [
        *(NewJob(name="bulk.w", queue=mail) for _ in range(50)),
        NewJob(name="bulk.w", queue=sms),
        NewJob(name="bulk.w", queue=later, run_at=future),
    ]
    with psycopg.connect(url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        asyncio.run(_insert(url, args, batch))
        heard = [n.payload for n in listener.notifies(timeout=1.0)]
    assert sorted(q for q in heard if q in {mail, sms, later}) == sorted([mail, sms])
