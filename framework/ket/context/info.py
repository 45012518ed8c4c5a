"""What a handler can read about the work it is doing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from ket.errors import StoreError
from ket.store.types import Fire


@dataclass(frozen=True, kw_only=True, slots=True)
class JobInfo:
    """`ctx.job`: the running job. `attempt` is 1 on the first run."""

    id: int
    name: str
    key: str | None
    queue: str
    attempt: int
    max_attempts: int
    tenant: str
    company: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleInfo:
    """`ctx.schedule`: the tick that fired this job (aware UTC) and how many were passed over;
    `await ctx.schedule.fires()` reads the schedule's recent fires (plain handlers call it
    without `await`)."""

    __ket_api__: ClassVar[bool] = True  # a plain handler's context makes `fires` blocking

    tick: datetime
    skipped: int
    ledger: Callable[[int], Awaitable[list[Fire]]] | None = field(
        default=None, repr=False, compare=False
    )

    async def fires(self, limit: int = 10) -> list[Fire]:
        """The schedule's most recent fires, newest first (this one among them): each with its
        `tick`, `skipped`, `job_id` and `fired_at`."""
        if self.ledger is None:
            raise StoreError("this store keeps no fire ledger")
        return await self.ledger(limit)
