"""The `run` fixture: each context test on a memory store and on SQLite (a temporary file)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from ket.store.memory import MemoryStore
from ket.store.sql import SqlStore
from tests.unit.context.hotel import MODELS, Scenario, Store


@pytest.fixture(params=["memory", "sqlite"])
def on_each_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Scenario], None]:
    """Runs a scenario on a fresh store of the parameter's kind, the models installed."""

    async def open_store() -> Store:
        if request.param == "memory":
            return MemoryStore()
        return await SqlStore.open(f"sqlite:///{tmp_path / 'tenant.db'}", migrate=True)

    def runner(scenario: Scenario) -> None:
        async def main() -> None:
            store = await open_store()
            try:
                await store.record_install(list(MODELS.values()))
                await scenario(store)
            finally:
                await store.close()

        asyncio.run(main())

    return runner
