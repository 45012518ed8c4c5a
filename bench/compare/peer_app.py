"""The PgQueuer side's worker code: the factory `pgq run peer_app:create` loads, with one no-op
async entrypoint. The database is `KET_CMP_DSN`."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg  # type: ignore[import-untyped]  # no stubs ship with it
from pgqueuer import Job, PgQueuer
from starts import StartLog

ENTRYPOINT = "noop"
DSN_ENV = "KET_CMP_DSN"

_starts = StartLog.from_environment()


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The PgQueuer instance `pgq run` serves: one asyncpg connection, as in its README."""
    connection = await asyncpg.connect(os.environ[DSN_ENV])
    pgq = PgQueuer.from_asyncpg_connection(connection)

    @pgq.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        if _starts is not None:
            _starts.record(job.id, time.time())

    try:
        yield pgq
    finally:
        await connection.close()
