"""The `ctx` a handler receives: for a function, and for a job (which adds itself and a signal)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

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
    """What a running job sees: a function's context plus the job, its signal and its tick,
    and `progress(fraction, note=None)`: how far it is (0 to 1), shown by `ket jobs show` and
    the dashboard once the next heartbeat writes it, and a `progress` event at once; and
    `await step(name, fn, *args)`: a durable step, run once across the job's attempts
    (ket.context.step)."""

    job: JobInfo
    signal: AbortSignal
    schedule: ScheduleInfo | None

    def __getattr__(self, name: str) -> Any:
        # Only called for a member not made yet, in a context from `job_context_made_on_use`.
        make = self.__dict__.get(_MAKE)
        if make is None or name not in MADE_ON_USE:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = make(name)
        object.__setattr__(self, name, value)
        return value

    def __dir__(self) -> list[str]:
        names = set(object.__dir__(self)) | {f.name for f in fields(self)}
        return sorted(names - {_MAKE})


# The members of a job's context that `job_context_made_on_use` makes when first read.
MADE_ON_USE = frozenset(
    {"job", "log", "db", "tx", "jobs", "storage", "transport", "progress", "step"}
)
_MAKE = "_JobContext__make"  # kept in the instance, mangled: off the handler's surface


def job_context_made_on_use(
    make: Callable[[str], object],
    *,
    tenant: str,
    company: str | None,
    clock: Callable[[], datetime],
    signal: AbortSignal,
    schedule: ScheduleInfo | None,
) -> JobContext:
    """A JobContext whose MADE_ON_USE members are made by `make(name)` when first read, and
    kept: most handlers use few of them, and an attempt pays for none it does not use."""
    ctx = object.__new__(JobContext)
    members = {
        "tenant": tenant,
        "company": company,
        "clock": clock,
        "signal": signal,
        "schedule": schedule,
        _MAKE: make,
    }
    object.__setattr__(ctx, "__dict__", members)
    return ctx
