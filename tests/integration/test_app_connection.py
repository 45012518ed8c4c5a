"""Enqueue on the application's own SQLAlchemy connection: the job exists iff its transaction
commits, on SQLite and PostgreSQL, for one job and for a batch (one statement of arrays on
PostgreSQL, numbered rows on SQLite)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text

from ket.store import JobQuery, NewJob
from ket.store.sql import SqlStore
from ket.store.sql.engine import sync_url
from ket.store.sql.insert import NUMBERED_FROM


@pytest.fixture(params=["sqlite", "postgresql"])
def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """(url, connect_args) of an empty, migrated database of each dialect."""
    if request.param == "sqlite":
        url, args = f"sqlite:///{tmp_path / 'app.db'}", {}
    else:
        schema = request.getfixturevalue("postgres_schema")
        url = request.getfixturevalue("postgres_url")
        args = {"options": f"-c search_path={schema}"}
    asyncio.run(_migrate(url, args))
    yield url, args


async def _migrate(url: str, args: dict[str, str]) -> None:
    store = await SqlStore.open(url, migrate=True, connect_args=args)
    await store.close()


async def _names(url: str, args: dict[str, str]) -> list[str]:
    store = await SqlStore.open(url, connect_args=args)
    try:
        return sorted(record.name for record in await store.job_list(JobQuery(limit=1_000)))
    finally:
        await store.close()


def _app_engine(url: str, args: dict[str, str]) -> Engine:
    return create_engine(sync_url(url), connect_args=args)


@pytest.mark.parametrize("count", [1, NUMBERED_FROM + 6])
def test_jobs_enqueued_in_a_committed_app_transaction_exist(
    database: tuple[str, dict[str, str]], count: int
) -> None:
    url, args = database
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    engine = _app_engine(url, args)
    try:
        with engine.begin() as connection:
            connection.execute(text("SELECT 1"))  # the app's own work would go here
            inserted = store.job_insert_sync(
                connection, [NewJob(name=f"app.job{i:03}") for i in range(count)]
            )
        assert len({i.id for i in inserted}) == count
        assert asyncio.run(_names(url, args)) == [f"app.job{i:03}" for i in range(count)]
    finally:
        engine.dispose()
        asyncio.run(store.close())


@pytest.mark.parametrize("count", [1, NUMBERED_FROM + 6])
def test_jobs_enqueued_in_a_rolled_back_app_transaction_do_not_exist(
    database: tuple[str, dict[str, str]], count: int
) -> None:
    url, args = database
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    engine = _app_engine(url, args)
    try:
        with pytest.raises(RuntimeError, match="the app failed"), engine.begin() as connection:
            store.job_insert_sync(connection, [NewJob(name="app.job") for _ in range(count)])
            raise RuntimeError("the app failed")
        assert asyncio.run(_names(url, args)) == []
    finally:
        engine.dispose()
        asyncio.run(store.close())
