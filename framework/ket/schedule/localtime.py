"""Local time: mapping between instants and the naive wall-clock times cron runs on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from ket.schedule.instant import epoch_seconds, from_epoch_seconds

# How far apart the transition searches probe a zone's offset. Since 1970 no tzdata zone changes
# its offset twice within a week (the closest pairs are 167 hours apart), so a change and its
# reversal can never both fall between two probes a day apart and cancel out unseen.
_PROBE = timedelta(days=1)


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


def utc_offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    """The UTC offset zone's clock shows at an aware instant."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None  # a ZoneInfo always has an offset for an aware instant
    return offset


def next_transition(after: datetime, until: datetime, zone: ZoneInfo) -> datetime | None:
    """The first instant in (after, until] at which zone's UTC offset changes, or None."""
    low = after
    while low < until:
        high = min(low + _PROBE, until)
        if utc_offset(high, zone) != utc_offset(low, zone):
            return _transition_between(low, high, zone)
        low = high
    return None


def previous_transition(since: datetime, before: datetime, zone: ZoneInfo) -> datetime | None:
    """The last instant in (since, before] at which zone's UTC offset changes, or None."""
    high = before
    while high > since:
        low = max(high - _PROBE, since)
        if utc_offset(low, zone) != utc_offset(high, zone):
            return _transition_between(low, high, zone)
        high = low
    return None


def _transition_between(low: datetime, high: datetime, zone: ZoneInfo) -> datetime:
    """The first whole second in (low, high] whose UTC offset differs from low's."""
    # zoneinfo does not expose its transition table, so bisect on the offset; tzdata
    # transitions fall on whole seconds, and this also handles Lord Howe's 30-minute shift.
    low_s, high_s = epoch_seconds(low), epoch_seconds(high)
    offset_before = from_epoch_seconds(low_s).astimezone(zone).utcoffset()
    if from_epoch_seconds(high_s).astimezone(zone).utcoffset() == offset_before:
        return high  # callers ask only when the offsets differ; keep monotonic all the same
    while high_s - low_s > 1:
        middle = (low_s + high_s) // 2
        if from_epoch_seconds(middle).astimezone(zone).utcoffset() == offset_before:
            low_s = middle
        else:
            high_s = middle
    return from_epoch_seconds(high_s)
