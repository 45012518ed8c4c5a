"""Enqueues that arrive together commit together (ket.store.sql.gather), on SQLite and
PostgreSQL: concurrent producers in one process, async tasks or threads, share statements and
commits, each caller gets back its own jobs, and a job the database refuses fails its caller
alone.

Jobs inserted by one statement carry one `enqueued_at` (PostgreSQL's transaction time; on
SQLite the insert's one now), so the number of distinct `enqueued_at` values counts the
commits the producers' jobs took."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from typing import Any

import psycopg
import pytest

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.errors import StoreError


async def place(ctx: Any, input: Any) -> None:
    return None


orders = define_module(
    name="orders",
    jobs={
        "place": define_job(
            queue="orders",
            input={"order_id": "string", "customer_id": "string", "amount_cents": "int"},
            idempotent=True,
            handler=place,
        )
    },
)
APP = define_deployment(name="shop", modules=[orders], worker={"queues": {"orders": 2}})
REFUSED = "o-refused"


def _order(n: int | str) -> dict[str, Any]:
    return {"order_id": f"o-{n}", "customer_id": f"c-{n}", "amount_cents": 1_000}


def _rows(url: str) -> dict[int, tuple[str, str]]:
    """Every job: id -> (its order id, its enqueued_at as text)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            found = connection.execute("SELECT id, payload, enqueued_at FROM ket_jobs").fetchall()
        return {row[0]: (json.loads(row[1])["order_id"], str(row[2])) for row in found}
    with psycopg.connect(url) as connection:
        found = connection.execute("SELECT id, payload, enqueued_at FROM ket_jobs").fetchall()
    return {row[0]: (row[1]["order_id"], row[2].isoformat()) for row in found}


def _refuse_an_order(url: str) -> None:
    """A rule of the application's in the database: the order REFUSED cannot be written."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as connection:
            connection.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON ket_jobs WHEN "
                f"json_extract(NEW.payload, '$.order_id') = '{REFUSED}' "
                "BEGIN SELECT RAISE(ABORT, 'order refused by the shop'); END"
            )
        return
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.payload->>'order_id' = '{REFUSED}' THEN "
            "RAISE EXCEPTION 'order refused by the shop'; END IF; RETURN NEW; END $$"
        )
        connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON ket_jobs FOR EACH ROW EXECUTE FUNCTION refuse()"
        )


def test_concurrent_async_enqueues_commit_together_each_caller_getting_its_own_job(
    tenant_database: str,
) -> None:
    async def scenario() -> list[Any]:
        client = await open_async_client(APP, database_url=tenant_database)
        try:
            return await asyncio.gather(
                *(client.aenqueue("orders.place", _order(n)) for n in range(40))
            )
        finally:
            await client.aclose()

    inserted = asyncio.run(scenario())
    rows = _rows(tenant_database)
    assert len(rows) == 40
    # each caller's id is the job holding that caller's input
    assert [rows[row.id][0] for row in inserted] == [f"o-{n}" for n in range(40)]
    commits = {enqueued_at for _, enqueued_at in rows.values()}
    # the first went alone, the 39 that came while it was under way went as one
    assert len(commits) <= 3, sorted(commits)


def test_enqueues_from_many_threads_share_commits_each_thread_getting_its_own_jobs(
    tenant_database: str,
) -> None:
    threads, each = 16, 10
    inserted: dict[str, int] = {}
    start = threading.Barrier(threads)
    failures: list[BaseException] = []
    with open_client(APP, database_url=tenant_database) as client:

        def produce(t: int) -> None:
            try:
                start.wait(10)
                for n in range(each):
                    order = _order(f"{t}-{n}")
                    inserted[order["order_id"]] = client.enqueue("orders.place", order).id
            except BaseException as error:
                failures.append(error)

        workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
    assert failures == []
    rows = _rows(tenant_database)
    assert len(rows) == threads * each
    assert {order: rows[job_id][0] for order, job_id in inserted.items()} == {
        order: order for order in inserted
    }
    commits = {enqueued_at for _, enqueued_at in rows.values()}
    # one commit a job without gathering; sixteen threads at once share most of them
    assert len(commits) <= threads * each * 3 // 4, len(commits)


def test_a_job_the_database_refuses_fails_its_own_caller_alone(tenant_database: str) -> None:
    _refuse_an_order(tenant_database)

    async def scenario() -> list[Any]:
        client = await open_async_client(APP, database_url=tenant_database)
        try:
            calls = [client.aenqueue("orders.place", _order(n)) for n in range(12)]
            calls.insert(6, client.aenqueue("orders.place", _order("refused")))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.aclose()

    outcomes = asyncio.run(scenario())
    refused = outcomes.pop(6)
    assert isinstance(refused, StoreError), refused
    assert "order refused by the shop" in str(refused)
    rows = _rows(tenant_database)
    # the others were written, each caller's id its own job, in a group of their own
    assert sorted(order for order, _ in rows.values()) == sorted(f"o-{n}" for n in range(12))
    assert [rows[row.id][0] for row in outcomes] == [f"o-{n}" for n in range(12)]


@pytest.mark.parametrize("count", [2, 200])
def test_enqueue_many_from_concurrent_callers_keeps_each_batch_whole_and_in_order(
    tenant_database: str, count: int
) -> None:
    async def scenario() -> list[list[Any]]:
        client = await open_async_client(APP, database_url=tenant_database)
        try:
            batches = [
                [("orders.place", _order(f"{b}-{n}")) for n in range(count)] for b in range(6)
            ]
            return await asyncio.gather(*(client.aenqueue_many(batch) for batch in batches))
        finally:
            await client.aclose()

    batches = asyncio.run(scenario())
    rows = _rows(tenant_database)
    assert len(rows) == 6 * count
    for b, batch in enumerate(batches):
        assert [rows[row.id][0] for row in batch] == [f"o-{b}-{n}" for n in range(count)]
