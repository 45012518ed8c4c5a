"""The `ctx` a job handler receives."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ket.context.info import JobInfo, ScheduleInfo
from ket.context.jobs import Jobs
from ket.context.log import ContextLog
from ket.context.signal import AbortSignal


@dataclass(frozen=True, kw_only=True)
class JobContext:
    """What a running job sees: itself, its signal, enqueueing, logging and the time.

    In an `async def` handler every operation is awaited (`await ctx.jobs.enqueue(...)`); a plain
    handler gets the same context through a blocking adapter and calls it without `await`.
    """

    job: JobInfo
    signal: AbortSignal
    jobs: Jobs
    log: ContextLog
    schedule: ScheduleInfo | None
    clock: Callable[[], datetime]

    @property
    def tenant(self) -> str:
        """The tenant whose database this job runs against."""
        return self.job.tenant

    @property
    def company(self) -> str | None:
        """The company the job was enqueued for, if any."""
        return self.job.company

    def now(self) -> datetime:
        """The current time (the test clock under `create_test_deployment`), aware UTC."""
        return self.clock()
