"""The memory store runs the conformance kit, unchanged, like SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from ket.store.clock import Clock
from ket.store.memory import MemoryDatabase, MemoryStore
from ket.tck import *  # noqa: F403


class MemoryFactory:
    """A StoreFactory (ket.tck.harness): every handle opens on this test's one database."""

    def __init__(self) -> None:
        self.database = MemoryDatabase()

    async def open(self, clock: Clock | None) -> MemoryStore:
        return MemoryStore(self.database, clock=clock)

    async def cleanup(self) -> None:
        pass


@pytest.fixture
def ket_store_factory() -> MemoryFactory:
    return MemoryFactory()
