"""Wall-clock schedules across DST transitions in six zones, with instants worked out by hand.

Transition dates were checked against the installed tzdata (zoneinfo) for 2025:
  America/New_York     2025-03-09 02:00->03:00 (EST-5 -> EDT-4)   2025-11-02 02:00->01:00
  Europe/London        2025-03-30 01:00->02:00 (GMT -> BST+1)     2025-10-26 02:00->01:00
  Australia/Sydney     2025-04-06 03:00->02:00 (AEDT+11 -> AEST+10) 2025-10-05 02:00->03:00
  Australia/Lord_Howe  2025-04-06 02:00->01:30 (+11 -> +10:30)    2025-10-05 02:00->02:30
  Africa/Cairo         2025-04-25 00:00->01:00 (EET+2 -> EEST+3)  2025-10-30 24:00->23:00
  America/Santiago     2025-04-06 00:00->04-05 23:00 (-3 -> -4)   2025-09-07 00:00->01:00
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from ket.schedule import WallClock, parse_schedule


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def wallclock(raw: dict[str, object]) -> WallClock:
    schedule = parse_schedule(raw, default_timezone=None)
    assert isinstance(schedule, WallClock)
    return schedule


@dataclass(frozen=True, kw_only=True)
class Gap:
    """A daily_at whose wall time does not exist on the spring-forward day."""

    zone: str
    at: str
    day_before: datetime  # the ordinary tick on the previous day
    gap_end: datetime  # the transition instant, where the missing wall time fires
    day_after: datetime  # the ordinary tick on the next day


@dataclass(frozen=True, kw_only=True)
class Overlap:
    """A daily_at whose wall time happens twice on the fall-back day."""

    zone: str
    at: str
    day_before: datetime
    first: datetime  # the first occurrence: the only tick that day
    second: datetime  # the repeated occurrence: not a tick
    day_after: datetime


GAPS = [
    # 02:30 EST on 03-08 = 07:30Z; gap ends 03:00 EDT = 07:00Z; 02:30 EDT on 03-10 = 06:30Z.
    Gap(
        zone="America/New_York",
        at="02:30",
        day_before=utc(2025, 3, 8, 7, 30),
        gap_end=utc(2025, 3, 9, 7, 0),
        day_after=utc(2025, 3, 10, 6, 30),
    ),
    # 01:30 GMT = 01:30Z; gap ends 02:00 BST = 01:00Z; 01:30 BST = 00:30Z.
    Gap(
        zone="Europe/London",
        at="01:30",
        day_before=utc(2025, 3, 29, 1, 30),
        gap_end=utc(2025, 3, 30, 1, 0),
        day_after=utc(2025, 3, 31, 0, 30),
    ),
    # 02:30 AEST(+10) = 16:30Z prev day; gap ends 03:00 AEDT = 16:00Z; 02:30 AEDT = 15:30Z.
    Gap(
        zone="Australia/Sydney",
        at="02:30",
        day_before=utc(2025, 10, 3, 16, 30),
        gap_end=utc(2025, 10, 4, 16, 0),
        day_after=utc(2025, 10, 5, 15, 30),
    ),
    # 02:15 at +10:30 = 15:45Z prev day; 30-minute gap ends 02:30 (+11) = 15:30Z; 02:15 at +11
    # = 15:15Z.
    Gap(
        zone="Australia/Lord_Howe",
        at="02:15",
        day_before=utc(2025, 10, 3, 15, 45),
        gap_end=utc(2025, 10, 4, 15, 30),
        day_after=utc(2025, 10, 5, 15, 15),
    ),
    # Midnight gap: 00:30 EET(+2) = 22:30Z prev day; gap ends 01:00 EEST = 22:00Z; 00:30 EEST
    # = 21:30Z.
    Gap(
        zone="Africa/Cairo",
        at="00:30",
        day_before=utc(2025, 4, 23, 22, 30),
        gap_end=utc(2025, 4, 24, 22, 0),
        day_after=utc(2025, 4, 25, 21, 30),
    ),
    # Midnight itself is missing in Cairo: 00:00 fires at the same gap end.
    Gap(
        zone="Africa/Cairo",
        at="00:00",
        day_before=utc(2025, 4, 23, 22, 0),
        gap_end=utc(2025, 4, 24, 22, 0),
        day_after=utc(2025, 4, 25, 21, 0),
    ),
    # 00:30 at -4 = 04:30Z; gap ends 01:00 at -3 = 04:00Z; 00:30 at -3 = 03:30Z.
    Gap(
        zone="America/Santiago",
        at="00:30",
        day_before=utc(2025, 9, 6, 4, 30),
        gap_end=utc(2025, 9, 7, 4, 0),
        day_after=utc(2025, 9, 8, 3, 30),
    ),
]

OVERLAPS = [
    # 01:30 EDT = 05:30Z, again as EST = 06:30Z; 01:30 EST next day = 06:30Z.
    Overlap(
        zone="America/New_York",
        at="01:30",
        day_before=utc(2025, 11, 1, 5, 30),
        first=utc(2025, 11, 2, 5, 30),
        second=utc(2025, 11, 2, 6, 30),
        day_after=utc(2025, 11, 3, 6, 30),
    ),
    # 01:30 BST = 00:30Z, again as GMT = 01:30Z.
    Overlap(
        zone="Europe/London",
        at="01:30",
        day_before=utc(2025, 10, 25, 0, 30),
        first=utc(2025, 10, 26, 0, 30),
        second=utc(2025, 10, 26, 1, 30),
        day_after=utc(2025, 10, 27, 1, 30),
    ),
    # Southern autumn: 02:30 AEDT(+11) = 15:30Z prev day, again as AEST(+10) = 16:30Z.
    Overlap(
        zone="Australia/Sydney",
        at="02:30",
        day_before=utc(2025, 4, 4, 15, 30),
        first=utc(2025, 4, 5, 15, 30),
        second=utc(2025, 4, 5, 16, 30),
        day_after=utc(2025, 4, 6, 16, 30),
    ),
    # 30-minute overlap 01:30-02:00: 01:45 at +11 = 14:45Z, again at +10:30 = 15:15Z.
    Overlap(
        zone="Australia/Lord_Howe",
        at="01:45",
        day_before=utc(2025, 4, 4, 14, 45),
        first=utc(2025, 4, 5, 14, 45),
        second=utc(2025, 4, 5, 15, 15),
        day_after=utc(2025, 4, 6, 15, 15),
    ),
    # 24:00 -> 23:00 on 10-30: 23:30 EEST(+3) = 20:30Z, again as EET(+2) = 21:30Z.
    Overlap(
        zone="Africa/Cairo",
        at="23:30",
        day_before=utc(2025, 10, 29, 20, 30),
        first=utc(2025, 10, 30, 20, 30),
        second=utc(2025, 10, 30, 21, 30),
        day_after=utc(2025, 10, 31, 21, 30),
    ),
    # 00:00 on 04-06 -> 23:00 on 04-05: 23:30 at -3 = 02:30Z on 04-06, again at -4 = 03:30Z.
    Overlap(
        zone="America/Santiago",
        at="23:30",
        day_before=utc(2025, 4, 5, 2, 30),
        first=utc(2025, 4, 6, 2, 30),
        second=utc(2025, 4, 6, 3, 30),
        day_after=utc(2025, 4, 7, 3, 30),
    ),
]


def _id(case: Gap | Overlap) -> str:
    return f"{case.zone}-{case.at}"


@pytest.mark.parametrize("case", GAPS, ids=_id)
def test_daily_at_in_spring_forward_gap_fires_at_end_of_gap(case: Gap) -> None:
    schedule = wallclock({"daily_at": case.at, "timezone": case.zone})
    assert schedule.next_tick(case.day_before) == case.gap_end
    assert schedule.tick_at(case.gap_end) == case.gap_end
    assert schedule.tick_at(case.gap_end - timedelta(seconds=1)) == case.day_before


@pytest.mark.parametrize("case", GAPS, ids=_id)
def test_daily_at_after_spring_forward_gap_returns_to_its_wall_time(case: Gap) -> None:
    schedule = wallclock({"daily_at": case.at, "timezone": case.zone})
    assert schedule.next_tick(case.gap_end) == case.day_after
    assert schedule.tick_at(case.day_after - timedelta(seconds=1)) == case.gap_end


@pytest.mark.parametrize("case", GAPS, ids=_id)
def test_daily_at_count_ticks_across_spring_forward_day_counts_the_gap_tick_once(
    case: Gap,
) -> None:
    schedule = wallclock({"daily_at": case.at, "timezone": case.zone})
    assert schedule.count_ticks(case.day_before, case.day_after) == 1
    assert schedule.count_ticks(case.day_before - timedelta(days=1), case.day_after) == 2


@pytest.mark.parametrize("case", OVERLAPS, ids=_id)
def test_daily_at_in_fall_back_overlap_fires_once_at_first_occurrence(case: Overlap) -> None:
    schedule = wallclock({"daily_at": case.at, "timezone": case.zone})
    assert schedule.next_tick(case.day_before) == case.first
    assert schedule.tick_at(case.first) == case.first
    # The repeated wall time is not a second tick: the latest tick is still the first one,
    # and the next one is on the following day.
    assert schedule.tick_at(case.second) == case.first
    assert schedule.next_tick(case.first) == case.day_after
    assert schedule.next_tick(case.second) == case.day_after


@pytest.mark.parametrize("case", OVERLAPS, ids=_id)
def test_daily_at_count_ticks_across_fall_back_day_counts_one_tick(case: Overlap) -> None:
    schedule = wallclock({"daily_at": case.at, "timezone": case.zone})
    assert schedule.count_ticks(case.day_before, case.day_after) == 1
    assert schedule.count_ticks(case.first, case.day_after) == 0


@pytest.mark.parametrize(
    ("zone", "tick"),
    [
        # 09:00 on 2025-07-01 (northern summer, southern winter), then 2025-01-15.
        ("America/New_York", utc(2025, 7, 1, 13, 0)),  # EDT -4
        ("Europe/London", utc(2025, 7, 1, 8, 0)),  # BST +1
        ("Australia/Sydney", utc(2025, 6, 30, 23, 0)),  # AEST +10
        ("Australia/Lord_Howe", utc(2025, 6, 30, 22, 30)),  # +10:30
        ("Africa/Cairo", utc(2025, 7, 1, 6, 0)),  # EEST +3
        ("America/Santiago", utc(2025, 7, 1, 13, 0)),  # -4
    ],
)
def test_daily_at_on_ordinary_summer_and_winter_days_fires_at_its_wall_time(
    zone: str, tick: datetime
) -> None:
    schedule = wallclock({"daily_at": "09:00", "timezone": zone})
    assert schedule.next_tick(tick - timedelta(hours=12)) == tick
    assert schedule.tick_at(tick + timedelta(hours=12)) == tick
    assert schedule.next_tick(tick) == tick + timedelta(days=1)


@pytest.mark.parametrize(
    ("zone", "tick"),
    [
        ("America/New_York", utc(2025, 1, 15, 14, 0)),  # EST -5
        ("Europe/London", utc(2025, 1, 15, 9, 0)),  # GMT
        ("Australia/Sydney", utc(2025, 1, 14, 22, 0)),  # AEDT +11
        ("Australia/Lord_Howe", utc(2025, 1, 14, 22, 0)),  # +11
        ("Africa/Cairo", utc(2025, 1, 15, 7, 0)),  # EET +2
        ("America/Santiago", utc(2025, 1, 15, 12, 0)),  # -3
    ],
)
def test_daily_at_on_ordinary_days_of_the_other_season_fires_at_its_wall_time(
    zone: str, tick: datetime
) -> None:
    schedule = wallclock({"daily_at": "09:00", "timezone": zone})
    assert schedule.next_tick(tick - timedelta(hours=12)) == tick
    assert schedule.tick_at(tick) == tick


@pytest.mark.parametrize(
    ("zone", "expression", "after", "before", "ticks"),
    [
        # Each row brackets one local transition day by the ticks just outside it (both
        # excluded). These crons are frequencies: a spring day has one hour fewer to tick in,
        # a fall day one more, whose repeated hour ticks in both folds.
        ("America/New_York", "0 * * * *", utc(2025, 3, 9, 4), utc(2025, 3, 10, 4), 23),
        ("America/New_York", "0 * * * *", utc(2025, 11, 2, 3), utc(2025, 11, 3, 5), 25),
        ("Europe/London", "0 * * * *", utc(2025, 3, 29, 23), utc(2025, 3, 30, 23), 23),
        ("Europe/London", "0 * * * *", utc(2025, 10, 25, 22), utc(2025, 10, 27, 0), 25),
        ("Australia/Sydney", "0 * * * *", utc(2025, 4, 5, 12), utc(2025, 4, 6, 14), 25),
        ("Australia/Sydney", "0 * * * *", utc(2025, 10, 4, 13), utc(2025, 10, 5, 13), 23),
        # Lord Howe's days are half an hour longer or shorter: one half-hour tick more or less.
        (
            "Australia/Lord_Howe",
            "*/30 * * * *",
            utc(2025, 4, 5, 12, 30),
            utc(2025, 4, 6, 13, 30),
            49,
        ),
        ("Australia/Lord_Howe", "*/30 * * * *", utc(2025, 10, 4, 13), utc(2025, 10, 5, 13), 47),
        ("Africa/Cairo", "0 * * * *", utc(2025, 4, 24, 21), utc(2025, 4, 25, 21), 23),
        ("Africa/Cairo", "0 * * * *", utc(2025, 10, 29, 20), utc(2025, 10, 30, 22), 25),
        ("America/Santiago", "0 * * * *", utc(2025, 4, 5, 2), utc(2025, 4, 6, 4), 25),
        ("America/Santiago", "0 * * * *", utc(2025, 9, 7, 3), utc(2025, 9, 8, 3), 23),
        # A fixed-hour cron names wall times: each fires once, so a fall day has 24 ticks.
        ("America/New_York", "0 0-23 * * *", utc(2025, 11, 2, 3), utc(2025, 11, 3, 5), 24),
        ("Africa/Cairo", "0 0-23 * * *", utc(2025, 10, 29, 20), utc(2025, 10, 30, 22), 24),
    ],
)
def test_cron_count_ticks_over_a_transition_day_counts_each_distinct_instant_once(
    zone: str, expression: str, after: datetime, before: datetime, ticks: int
) -> None:
    schedule = wallclock({"cron": expression, "timezone": zone})
    assert schedule.count_ticks(after, before) == ticks


def test_cron_on_sunday_midnight_in_santiago_gap_fires_on_that_sunday_at_gap_end() -> None:
    # 2025-09-07 is a Sunday whose 00:00 does not exist; it fires at 01:00 -03 = 04:00Z.
    schedule = wallclock({"cron": "0 0 * * 0", "timezone": "America/Santiago"})
    assert schedule.next_tick(utc(2025, 9, 1)) == utc(2025, 9, 7, 4, 0)
    assert schedule.next_tick(utc(2025, 9, 7, 4, 0)) == utc(2025, 9, 14, 3, 0)
