"""A SqlStore handle that fails on demand: a pool of one connection, held by an open transaction.

The kit's FaultyStoreFactory capability for the SQL store: while the outage lasts, every operation
of the handle waits `POOL_TIMEOUT` seconds for a connection and fails, as a worker does whose
pool is exhausted, so the kit can see what a database failure looks like to a caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ket.store.clock import Clock
from ket.store.sql import SqlStore
from ket.tck import Outage

POOL_TIMEOUT = 0.1


async def open_starved(url: str, clock: Clock | None, **options: Any) -> tuple[SqlStore, Outage]:
    """A handle with one pooled connection (and one in its lane), and the outage that holds
    them."""
    store = await SqlStore.open(
        url, clock=clock, pool_size=1, max_overflow=0, pool_timeout=POOL_TIMEOUT, **options
    )

    @asynccontextmanager
    async def outage() -> AsyncIterator[None]:
        # the pool's only connection, and on PostgreSQL the lane's, until the block ends
        async with store.transaction():
            if store.lane is None:
                yield
                return
            async with store.lane.connection():
                yield

    return store, outage
