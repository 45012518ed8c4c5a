"""Every: a fixed-interval schedule whose ticks are aligned to the Unix epoch in UTC."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Literal

from ket.errors import ScheduleError
from ket.schedule.duration import duration_seconds
from ket.schedule.fingerprint import fingerprint_of
from ket.schedule.instant import (
    epoch_microseconds,
    epoch_seconds,
    from_epoch_seconds,
    require_aware,
)

MIN_SECONDS = 10
"""The shortest interval: anything faster belongs in a loop, not a schedule."""

MAX_SECONDS = 365 * 86400
"""The longest interval: epoch-aligned ticks further apart than a year would fall on arbitrary
dates, and an unbounded count would overflow datetime."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Every:
    """A schedule ticking every `seconds`, at whole multiples of it since the Unix epoch (UTC)."""

    kind: ClassVar[Literal["every"]] = "every"
    text: str
    seconds: int

    def __post_init__(self) -> None:
        # Guards direct construction; parse_every gives the user-facing messages.
        if self.seconds < 1:
            raise ValueError(f"Every.seconds must be positive, got {self.seconds!r}")

    def tick_at(self, instant: datetime) -> datetime:
        """The latest tick at or before instant, as an aware UTC datetime."""
        epoch = epoch_seconds(require_aware(instant, "instant"))
        return from_epoch_seconds(epoch // self.seconds * self.seconds)

    def next_tick(self, after: datetime) -> datetime:
        """The earliest tick strictly after `after`, as an aware UTC datetime."""
        epoch = epoch_seconds(require_aware(after, "after"))
        # Flooring to whole seconds is safe: ticks are whole seconds, so none lies in between.
        return from_epoch_seconds((epoch // self.seconds + 1) * self.seconds)

    def count_ticks(self, after: datetime, before: datetime, *, limit: int = 100_000) -> int:
        """How many ticks t satisfy after < t < before, capped at limit."""
        low = epoch_microseconds(require_aware(after, "after"))
        high = epoch_microseconds(require_aware(before, "before"))
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit!r}")
        step = self.seconds * 1_000_000
        # Ticks are k*step; after < k*step < before means floor(low/step) < k < ceil(high/step).
        count = -(-high // step) - 1 - low // step
        return max(0, min(count, limit))

    @property
    def fingerprint(self) -> str:
        """Hash of the interval in seconds, so '900s' and '15m' agree."""
        return fingerprint_of(f"every {self.seconds}s")

    def describe(self) -> str:
        """Human summary, e.g. 'every 15m'."""
        return f"every {self.text}"

    def to_manifest(self) -> dict[str, object]:
        """The manifest form: {'every': text, 'fingerprint': fp}."""
        return {"every": self.text, "fingerprint": self.fingerprint}


def parse_every(text: str) -> Every:
    """Parse an every value such as '15m'; raise ScheduleError naming it if it is not one."""
    seconds = duration_seconds(text)
    if seconds is None or text.startswith("0"):  # an interval counts from 1: no '0m', '015m'
        raise ScheduleError(
            f"every must be '<count><s|m|h|d>' such as '15m', got {text!r}", problem="syntax"
        )
    if seconds < MIN_SECONDS:
        raise ScheduleError(
            f"every must be at least {MIN_SECONDS}s, got {text!r}", problem="too_frequent"
        )
    if seconds > MAX_SECONDS:
        raise ScheduleError(f"every must be at most 365d, got {text!r}", problem="syntax")
    return Every(text=text, seconds=seconds)
