"""The time seam: where a store's "now" comes from.

A store built without a clock takes its time from the database (`now()` on PostgreSQL), so a
worker with a wrong clock can neither rescue live work early nor stretch a lease. A store built
with a clock (the test clock) takes every due time, lease and rescue deadline from it instead.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


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


def _aware(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError(f"the clock needs a timezone-aware datetime, got {instant!r}")
    return instant.astimezone(UTC)
