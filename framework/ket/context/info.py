"""What a handler can read about the work it is doing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


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
    """`ctx.schedule`: the tick that fired this job (aware UTC) and how many were passed over."""

    tick: datetime
    skipped: int
