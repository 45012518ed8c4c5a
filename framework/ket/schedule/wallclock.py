"""WallClock: a daily_at or cron schedule that fires on local wall-clock time in an IANA zone."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import croniter

from ket.schedule.cron import canonical_cron, frequency_period
from ket.schedule.fingerprint import fingerprint_of
from ket.schedule.frequency import frequency_tick_at, frequency_ticks_after
from ket.schedule.instant import require_aware
from ket.schedule.localtime import wall_time, wall_to_instant
from ket.schedule.zone import zone_info

# How far past the query's wall reading tick_at first looks. Cron has minute resolution, so one
# minute usually suffices; around a fall-back overlap the window doubles until it is wide enough.
# A fixed multi-hour margin would also be correct but costs ~180 croniter steps per call for a
# per-minute cron.
_FIRST_STEP = timedelta(minutes=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class WallClock:
    """A schedule firing at the wall times of a 5-field cron expression in an IANA zone."""

    kind: Literal["daily_at", "cron"]
    text: str
    expression: str
    timezone: str

    @property
    def _zone(self) -> ZoneInfo:
        return zone_info(self.timezone)

    @property
    def period(self) -> timedelta | None:
        """The period if the cron is a frequency (hour field `*` or a step), else None."""
        return frequency_period(self.expression)

    def tick_at(self, instant: datetime) -> datetime:
        """The latest tick at or before instant, as an aware UTC datetime."""
        instant = require_aware(instant, "instant")
        period = self.period
        if period is not None:
            return frequency_tick_at(self.expression, self._zone, period, instant)
        return _wall_time_tick_at(self.expression, self._zone, instant)

    def next_tick(self, after: datetime) -> datetime:
        """The earliest tick strictly after `after`, as an aware UTC datetime."""
        return next(self._ticks_after(require_aware(after, "after")))

    def count_ticks(self, after: datetime, before: datetime, *, limit: int = 100_000) -> int:
        """How many ticks t satisfy after < t < before, capped at limit."""
        after = require_aware(after, "after")
        before = require_aware(before, "before")
        if limit < 0:
            raise ValueError(f"limit must not be negative, got {limit!r}")
        count = 0
        if before <= after:
            return count
        for tick in self._ticks_after(after):
            if tick >= before or count >= limit:
                break
            count += 1
        return count

    def _ticks_after(self, after: datetime) -> Iterator[datetime]:
        """Distinct ticks strictly after `after` (aware UTC), in order."""
        period = self.period
        if period is not None:
            return frequency_ticks_after(self.expression, self._zone, period, after)
        return _wall_time_ticks_after(self.expression, self._zone, after)

    @property
    def fingerprint(self) -> str:
        """Hash of the expanded expression and zone, so daily_at '03:00' equals '0 3 * * *'."""
        # kind and text are left out on purpose: they are spellings, not meaning.
        canonical = canonical_cron(self.expression)
        period = self.period
        if period is None:
            return fingerprint_of(f"wallclock {canonical} in {self.timezone}")
        # '*/2' and '0,2,4,...,22' expand alike but tick differently around DST, and the period
        # bounds the bridges, so a frequency's definition names it.
        hours = period // timedelta(hours=1)
        return fingerprint_of(f"wallclock {canonical} every {hours}h in {self.timezone}")

    def describe(self) -> str:
        """Human summary, e.g. 'daily at 03:00 (Asia/Ho_Chi_Minh)'."""
        if self.kind == "daily_at":
            return f"daily at {self.text} ({self.timezone})"
        return f"cron {self.text!r} ({self.timezone})"

    def to_manifest(self) -> dict[str, object]:
        """The manifest form: {kind: text, 'timezone': key, 'fingerprint': fp}."""
        return {self.kind: self.text, "timezone": self.timezone, "fingerprint": self.fingerprint}


def _wall_time_tick_at(expression: str, zone: ZoneInfo, instant: datetime) -> datetime:
    """The latest wall-time tick at or before an aware UTC instant."""
    start, step = wall_time(instant, zone) + _FIRST_STEP, _FIRST_STEP
    # The wall->instant map is monotonic, so once start maps after instant no cron time
    # at or after start can be the answer, and get_prev from it misses nothing. Inside an
    # overlap the wall times just ahead still map to the first occurrence, so widen.
    while wall_to_instant(start, zone) <= instant:
        start += step
        step *= 2
    walls = croniter(expression, start)
    while True:
        tick = wall_to_instant(walls.get_prev(datetime), zone)
        if tick <= instant:
            return tick


def _wall_time_ticks_after(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Distinct wall-time ticks strictly after an aware UTC instant, in order."""
    start, step = wall_time(after, zone), _FIRST_STEP
    # Mirror of _wall_time_tick_at: once start maps at or before `after`, no earlier wall time can
    # map after it. after's own wall reading exists and maps to its first occurrence, which is
    # never later than after, so this loop is only a guard for the monotonic assumption.
    while wall_to_instant(start, zone) > after:
        start -= step
        step *= 2
    walls = croniter(expression, start)
    previous: datetime | None = None
    while True:
        tick = wall_to_instant(walls.get_next(datetime), zone)
        # Wall times inside one spring-forward gap all map to its end: that is one tick.
        # The map is monotonic, so such duplicates always arrive back to back.
        if tick > after and tick != previous:
            previous = tick
            yield tick
