"""Frequencies: cron schedules that keep their rhythm across daylight-saving transitions.

A frequency (see cron.frequency_period) fires at two kinds of instant:

- readings: every instant at which the zone's clock reads a wall time the cron matches. A
  fall-back repeats readings, so both folds of a repeated hour fire; a spring-forward skips
  readings, and a skipped wall time is no reading at all.
- bridges: where a transition leaves two consecutive readings more than a period apart, the old
  clock's ticks from the transition until the new clock's first reading, each at most a period
  after the tick before it. An hourly cron across Lord Howe's 30-minute fall-back, or a two-hourly
  one across a one-hour fall-back, has no reading in the repeated interval, and one across a
  spring-forward loses the reading the gap skipped; the old clock's tick keeps the rhythm there.
  The period cap stops a bridge from reaching across a stretch the cron does not run in at all:
  a Sunday-to-Thursday cron in Cairo, whose clocks fall back at the end of Thursday, must not
  fire on Saturday evening because the old clock's next tick is Sunday's first.

Bridges lie strictly between two consecutive readings, so each function below first finds the
readings around its instant and then the bridges between them; tick_at and ticks_after see the
same set of ticks that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from ket.schedule.instant import epoch_seconds, from_epoch_seconds
from ket.schedule.localtime import next_transition, previous_transition, utc_offset

_SECOND = timedelta(seconds=1)


def frequency_tick_at(
    expression: str, zone: ZoneInfo, period: timedelta, instant: datetime
) -> datetime:
    """The latest tick at or before an aware UTC instant."""
    reading = next(_readings_at_or_before(expression, zone, instant))
    # A bridge follows a transition that comes at most a period after the reading; without one
    # before instant, the reading is the answer and the next one need not be looked up.
    if next_transition(reading, min(instant, reading + period), zone) is None:
        return reading
    following = next(_readings_after(expression, zone, instant))
    bridges = _bridges(expression, zone, period, reading, following)
    return max([reading, *(bridge for bridge in bridges if bridge <= instant)])


def frequency_ticks_after(
    expression: str, zone: ZoneInfo, period: timedelta, after: datetime
) -> Iterator[datetime]:
    """The ticks strictly after an aware UTC instant, in order."""
    previous = next(_readings_at_or_before(expression, zone, after))
    for reading in _readings_after(expression, zone, after):
        for bridge in _bridges(expression, zone, period, previous, reading):
            if bridge > after:
                yield bridge
        yield reading
        previous = reading


def _bridges(
    expression: str, zone: ZoneInfo, period: timedelta, reading: datetime, following: datetime
) -> list[datetime]:
    """The bridge ticks strictly between two consecutive readings."""
    if following - reading <= period:
        return []  # the rhythm holds without help
    # A bridge comes at most one period after `reading`, so only a transition before then matters
    # (transitions are days apart, so there is at most one).
    if next_transition(reading, reading + period, zone) is None:
        return []
    offset = utc_offset(reading, zone)  # the old clock, which `reading` was read on
    walls = _clock(expression, offset, reading)
    bridges: list[datetime] = []
    previous = reading
    while True:
        # The old clock's first tick after `reading` is past the transition: before it, the old
        # clock was the zone's clock, and the tick would have been a reading.
        tick = _instant(walls.get_next(datetime), offset)
        if tick >= following or tick - previous > period:
            return bridges
        bridges.append(tick)
        previous = tick


def _readings_after(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """The instants strictly after `after` whose reading in zone the cron matches, in order."""
    # Invariant: the zone's offset is `offset` from `anchor` until the next transition, and
    # `walls` yields that clock's ticks after `anchor`.
    anchor = _whole_second(after)  # ticks are whole minutes, so nothing lies in between
    offset = utc_offset(anchor, zone)
    walls = _clock(expression, offset, anchor)
    while True:
        tick = _instant(walls.get_next(datetime), offset)
        change = next_transition(anchor, tick, zone)
        if change is None:
            yield tick
            anchor = tick
            continue
        # The clock changed before that wall time came round: read the new clock from the change.
        anchor, offset = change, utc_offset(change, zone)
        walls = _clock(expression, offset, change - _SECOND)


def _readings_at_or_before(expression: str, zone: ZoneInfo, at: datetime) -> Iterator[datetime]:
    """The instants at or before `at` whose reading in zone the cron matches, latest first."""
    # Mirror of _readings_after: the offset is `offset` from the last transition up to `anchor`,
    # and `walls` yields that clock's ticks at or before `anchor`, going back.
    anchor = _whole_second(at)
    offset = utc_offset(anchor, zone)
    walls = _clock(expression, offset, anchor + _SECOND)
    while True:
        tick = _instant(walls.get_prev(datetime), offset)
        change = previous_transition(tick, anchor, zone)
        if change is None:
            yield tick
            anchor = tick
            continue
        # Before the change the zone read the old clock: go on back on that one.
        anchor = change - _SECOND
        offset = utc_offset(anchor, zone)
        walls = _clock(expression, offset, change)


def _clock(expression: str, offset: timedelta, start: datetime) -> croniter:
    """The cron's wall times on a clock fixed at offset, from start's reading on that clock."""
    # croniter steps from start, exclusive both ways: get_next is after it, get_prev before it.
    return croniter(expression, (start + offset).replace(tzinfo=None))


def _instant(wall: datetime, offset: timedelta) -> datetime:
    """The aware UTC instant at which a clock fixed at offset reads the naive wall time."""
    return (wall - offset).replace(tzinfo=UTC)


def _whole_second(instant: datetime) -> datetime:
    return from_epoch_seconds(epoch_seconds(instant))
