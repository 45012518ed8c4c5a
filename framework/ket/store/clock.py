"""The time seam: where a store's "now" comes from.

A store built without a clock takes its time from the database (`now()` on PostgreSQL), so a
worker with a wrong clock can neither rescue live work early nor stretch a lease. A store built
with a clock (the test clock) takes every due time, lease and rescue deadline from it instead.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Protocol

from ket.errors import JobRejected
from ket.store.types import NewJob


class Clock(Protocol):
    """Something that tells the time, as an aware UTC datetime."""

    def now(self) -> datetime: ...


class SystemClock:
    """This machine's clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that moves only when told to: `advance(...)` and `set(...)`."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = _aware(start or datetime.now(UTC))
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(
        self, *, seconds: float = 0, minutes: float = 0, hours: float = 0, days: float = 0
    ) -> datetime:
        """Move forward; a negative step is refused (time never runs backwards here)."""
        step = timedelta(seconds=seconds, minutes=minutes, hours=hours, days=days)
        if step < timedelta(0):
            raise ValueError(f"a clock only moves forward, got a step of {step}")
        with self._lock:
            self._now += step
            return self._now

    def set(self, instant: datetime) -> datetime:
        """Jump to `instant` (timezone-aware)."""
        with self._lock:
            self._now = _aware(instant)
            return self._now


def delays_ended(jobs: Sequence[NewJob], now: datetime) -> Sequence[NewJob]:
    """`jobs` with each delay made the instant it ends, counted from `now`, the store's now at
    the insert: a delay follows the database's clock (or the test clock), not the producer's.
    The very same sequence when no job has a delay, as almost none has."""
    if not any(job.delay_seconds for job in jobs):
        return jobs
    return [_delay_ended(job, now) if job.delay_seconds else job for job in jobs]


def _delay_ended(job: NewJob, now: datetime) -> NewJob:
    try:
        run_at = now + timedelta(seconds=job.delay_seconds)
    except OverflowError:  # a test clock set near the end of the calendar
        raise JobRejected(
            f"job {job.name!r}: delay_seconds of {job.delay_seconds!r} from {now.isoformat()} "
            "leaves the calendar"
        ) from None
    return replace(job, run_at=run_at, delay_seconds=0.0)


def _aware(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"the clock needs a timezone-aware datetime, got {instant!r}")
    return instant.astimezone(UTC)
