"""Local time: mapping between instants and the naive wall-clock times cron runs on."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from ket.schedule.instant import epoch_seconds, from_epoch_seconds


def wall_time(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock reading of an aware instant in zone."""
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def wall_to_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant (aware UTC) a naive wall time in zone fires at, per the product contract.

    A wall time that exists once is that instant; one in a fall-back overlap is its first
    occurrence; one in a spring-forward gap is the end of the gap (the transition instant).
    """
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    # fold=0 is the earlier reading of an overlap, so an existing wall time round-trips.
    if wall_time(first, zone) == wall.replace(fold=0):
        return first
    # A gap: per PEP 495, fold=0 uses the offset before the transition and lands *after* it,
    # fold=1 uses the offset after and lands *before* it; the transition lies between.
    before_gap = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return _transition_between(before_gap, first, zone)


def _transition_between(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second in (low, high] whose UTC offset differs from low's."""
    # zoneinfo does not expose its transition table, so bisect on the offset; tzdata
    # transitions fall on whole seconds, and this also handles Lord Howe's 30-minute shift.
    low_s, high_s = epoch_seconds(low), epoch_seconds(high)
    offset_before = from_epoch_seconds(low_s).astimezone(zone).utcoffset()
    if from_epoch_seconds(high_s).astimezone(zone).utcoffset() == offset_before:
        return high  # no transition found (cannot happen for a real gap); keep monotonic
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        if from_epoch_seconds(middle).astimezone(zone).utcoffset() == offset_before:
            low_s = middle
        else:
            high_s = middle
    return from_epoch_seconds(high_s)
