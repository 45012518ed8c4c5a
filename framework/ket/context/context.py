"""The `ctx` a handler receives: for a function, and for a job (which adds itself and a signal)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ket.context.db import Database
from ket.context.info import JobInfo, ScheduleInfo
from ket.context.jobs import Jobs
from ket.context.log import ContextLog
from ket.context.signal import AbortSignal
from ket.context.storage import Storage
from ket.context.transport import Transport
from ket.context.tx import Transact


@dataclass(frozen=True, kw_only=True)
class FunctionContext:
    """What a running function sees; every operation is checked against its declared effects.

    In an `async def` handler every operation is awaited (`await ctx.db.get(...)`); a plain
    handler gets the same context through a blocking adapter and calls it without `await`.
    """

    tenant: str
    company: str | None
    db: Database
    tx: Transact
    jobs: Jobs
    storage: Storage
    transport: Transport
    log: ContextLog
    clock: Callable[[], datetime]

    def now(self) -> datetime:
        """The current time (the test clock under `create_test_deployment`), aware UTC."""
        return self.clock()


@dataclass(frozen=True, kw_only=True)
class JobContext(FunctionContext):
    """What a running job sees: a function's context plus the job, its signal and its tick."""

    job: JobInfo
    signal: AbortSignal
    schedule: ScheduleInfo | None
