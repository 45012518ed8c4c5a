"""Delays and ISO times through open_client / open_async_client, on SQLite and PostgreSQL:
`run_in` counts from the database's now (read on the connection the job is written on, the
application's own included), `run_at` may be an ISO-8601 text with an offset."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.connection.engine import sync_url
from ket.errors import JobRejected
from ket.store import JobQuery, JobRecord
from ket.store.sql import SqlStore


async def send(ctx: Any, input: Any) -> None:
    return None


mail = define_module(
    name="mail",
    jobs={"send": define_job(queue="mail", input={"to": "string"}, idempotent=True, handler=send)},
)
APP = define_deployment(name="app", modules=[mail], worker={"queues": {"mail": 2}})


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The database's URL for SqlStore, and the client's (with the test schema on PostgreSQL)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'app.db'}"
        asyncio.run(_migrate(url, {}))
        yield url, url
        return
    schema = request.getfixturevalue("postgres_schema")
    url = request.getfixturevalue("postgres_url")
    asyncio.run(_migrate(url, {"options": f"-c search_path={schema}"}))
    yield url, f"{url}?options=-c%20search_path%3D{schema}"


async def _migrate(url: str, args: dict[str, str]) -> None:
    store = await SqlStore.open(url, migrate=True, connect_args=args)
    await store.close()


def _delays(client_url: str) -> dict[str, tuple[str, timedelta]]:
    """Each job's `to`: its state, and how long after its enqueue it is due."""

    async def read() -> list[JobRecord]:
        store = await SqlStore.open(client_url)
        try:
            return await store.job_list(JobQuery(limit=100))
        finally:
            await store.close()

    return {r.payload["to"]: (r.state, r.run_at - r.enqueued_at) for r in asyncio.run(read())}


def test_the_client_delays_from_the_databases_now_and_reads_iso_times(
    database: tuple[str, str],
) -> None:
    _, client_url = database
    engine = create_engine(sync_url(client_url))
    try:
        with open_client(APP, database_url=client_url) as client:
            client.enqueue("mail.send", {"to": "five"}, run_in="5m")
            client.enqueue("mail.send", {"to": "iso"}, run_at="2999-01-01T00:00:00Z")
            client.enqueue_many(
                [("mail.send", {"to": "bulk"}, {"run_in": 60}), ("mail.send", {"to": "now"})]
            )
            with engine.begin() as connection:
                client.enqueue(
                    "mail.send", {"to": "app"}, run_in=timedelta(hours=2), connection=connection
                )
            with pytest.raises(JobRejected, match="not both"):
                client.enqueue("mail.send", {"to": "x"}, run_in=5, run_at="2999-01-01T00:00:00Z")
    finally:
        engine.dispose()
    delays = _delays(client_url)
    assert delays["five"] == ("scheduled", timedelta(minutes=5))
    assert delays["bulk"] == ("scheduled", timedelta(seconds=60))
    assert delays["now"] == ("available", timedelta(0))
    assert delays["app"] == ("scheduled", timedelta(hours=2))
    assert delays["iso"][0] == "scheduled"
    assert "x" not in delays


def test_the_async_client_delays_from_the_databases_now(database: tuple[str, str]) -> None:
    _, client_url = database

    async def enqueue() -> None:
        client = await open_async_client(APP, database_url=client_url)
        try:
            await client.aenqueue("mail.send", {"to": "async"}, run_in="90s")
            await client.aenqueue_many([("mail.send", {"to": "many"}, {"run_in": 2.5})])
            await client.aenqueue(
                "mail.send", {"to": "at"}, run_at=datetime(2999, 1, 1, tzinfo=UTC)
            )
        finally:
            await client.aclose()

    asyncio.run(enqueue())
    delays = _delays(client_url)
    assert delays["async"] == ("scheduled", timedelta(seconds=90))
    assert delays["many"] == ("scheduled", timedelta(seconds=2.5))
    assert delays["at"][0] == "scheduled"
