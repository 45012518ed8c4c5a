"""SQLite's durability: `synchronous=FULL` on every connection ket opens unless the URL's
`?synchronous=` chooses another level; a bad level is refused naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from ket import define_deployment, define_job, define_module, open_client
from ket.connection.engine import sqlite_synchronous
from ket.control.registry import TenantRegistry
from ket.errors import StoreError
from ket.store.sql import SqlStore

FULL, NORMAL = 2, 1  # what PRAGMA synchronous reads back


async def noop(ctx: object, input: object) -> None:
    return None


APP = define_deployment(
    name="app",
    modules=[define_module(name="m", jobs={"j": define_job(idempotent=True, handler=noop)})],
)


def _store_level(url: str) -> int:
    async def read() -> int:
        store = await SqlStore.open(url)
        try:
            async with store.engine.connect() as connection:
                return int((await connection.exec_driver_sql("PRAGMA synchronous")).scalar_one())
        finally:
            await store.close()

    return asyncio.run(read())


def _client_level(url: str) -> int:
    _store_level(url)  # a client never makes the database: `ket migrate` (a store here) does
    with open_client(APP, database_url=url) as client, client._engine.connect() as connection:
        return int(connection.execute(text("PRAGMA synchronous")).scalar_one())


def _registry_level(url: str) -> int:
    registry = TenantRegistry(url)
    try:
        with registry._engine.connect() as connection:
            return int(connection.execute(text("PRAGMA synchronous")).scalar_one())
    finally:
        registry.close()


@pytest.mark.parametrize("level", [_store_level, _client_level, _registry_level])
def test_sqlite_commits_are_durable_by_default(level: Callable[[str], int], tmp_path: Path) -> None:
    assert level(f"sqlite:///{tmp_path / 'a.db'}") == FULL


@pytest.mark.parametrize("level", [_store_level, _client_level, _registry_level])
def test_the_url_chooses_another_level(level: Callable[[str], int], tmp_path: Path) -> None:
    # no driver warning either: the parameter is ket's, and never reaches sqlite3
    assert level(f"sqlite:///{tmp_path / 'a.db'}?synchronous=NORMAL") == NORMAL


@pytest.mark.parametrize(
    ("query", "given"), [("synchronous=fast", "'fast'"), ("synchronous=1", "'1'")]
)
def test_a_bad_level_is_refused_naming_it_before_anything_is_created(
    query: str, given: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}?{query}"
    expected = f"synchronous must be one of off, normal, full, extra, got {given} (from {url!r})"
    with pytest.raises(StoreError) as refused:
        asyncio.run(SqlStore.open(url))
    assert str(refused.value) == expected
    with pytest.raises(StoreError) as refused:
        open_client(APP, database_url=url)
    assert str(refused.value) == expected
    assert list(tmp_path.iterdir()) == []


def test_a_level_given_twice_is_refused() -> None:
    with pytest.raises(StoreError, match="got 'normal&full'"):
        sqlite_synchronous("sqlite:///a.db?synchronous=normal&synchronous=full")
