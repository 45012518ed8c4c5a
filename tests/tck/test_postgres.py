"""The conformance kit on the SQL store over PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

import pytest

from ket.store.clock import Clock
from ket.store.sql import SqlStore
from ket.tck import *  # noqa: F403


class PostgresFactory:
    """Handles on one schema of the test server; every handle has its own connection pool."""

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.migrated = False

    async def open(self, clock: Clock | None) -> SqlStore:
        store = await SqlStore.open(
            self.url,
            clock=clock,
            migrate=not self.migrated,
            connect_args={"options": f"-c search_path={self.schema}"},
        )
        self.migrated = True
        return store

    async def cleanup(self) -> None:
        pass  # the postgres_schema fixture drops the schema


@pytest.fixture
def ket_store_factory(postgres_url: str, postgres_schema: str) -> PostgresFactory:
    return PostgresFactory(postgres_url, postgres_schema)
