"""The conformance kit on the SQL store over SQLite (a fresh database file per test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ket.store.clock import Clock
from ket.store.sql import SqlStore
from ket.tck import *  # noqa: F403
from ket.tck import Outage
from tests.tck.starved import open_starved


class SqliteFactory:
    """Handles on one SQLite file; every handle is its own engine, like another process.

    Also a FaultyStoreFactory: its faulty handle has one connection, which the outage holds.
    """

    def __init__(self, path: Path) -> None:
        self.url = f"sqlite:///{path}"
        self.migrated = False

    async def open(self, clock: Clock | None) -> SqlStore:
        store = await SqlStore.open(self.url, clock=clock, migrate=not self.migrated)
        self.migrated = True
        return store

    async def open_faulty(self, clock: Clock | None) -> tuple[SqlStore, Outage]:
        return await open_starved(self.url, clock)

    async def cleanup(self) -> None:
        pass


@pytest.fixture
def ket_store_factory(tmp_path: Path) -> SqliteFactory:
    return SqliteFactory(tmp_path / "jobs.db")
