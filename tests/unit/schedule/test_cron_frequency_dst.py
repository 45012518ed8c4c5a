"""Frequency crons against fixed-hour crons across DST, with every tick worked out by hand.

A cron whose hour field is `*` or a step is a frequency: it fires in both folds of a repeated
hour and no gap across a transition exceeds its period. Any other cron, and daily_at, fires a
repeated wall time once (first occurrence) and a skipped one at the end of the gap.

2025 transitions, checked against the installed tzdata (zoneinfo):
  America/New_York     03-09 02:00 EST->03:00 EDT (07:00Z)    11-02 02:00 EDT->01:00 EST (06:00Z)
  Australia/Lord_Howe  10-05 02:00 +10:30->02:30 +11 (10-04 15:30Z)
                       04-06 02:00 +11->01:30 +10:30 (04-05 15:00Z)
  Africa/Cairo         04-25 00:00 EET->01:00 EEST (04-24 22:00Z, a Friday)
                       10-30 24:00 EEST->23:00 EET (21:00Z, a Thursday night)
  America/Santiago     09-07 00:00 -04->01:00 -03 (04:00Z)
                       04-06 00:00 -03->04-05 23:00 -04 (03:00Z)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from ket.schedule import WallClock, parse_schedule
from ket.schedule.cron import frequency_period

HOUR = timedelta(hours=1)
QUARTER = timedelta(minutes=15)
DAY = timedelta(days=1)
MICROSECOND = timedelta(microseconds=1)


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def wallclock(raw: dict[str, object]) -> WallClock:
    schedule = parse_schedule(raw, default_timezone=None)
    assert isinstance(schedule, WallClock)
    return schedule


def quarters(first: datetime, last: datetime) -> list[datetime]:
    """Every quarter hour from first to last, both included."""
    return [first + QUARTER * n for n in range((last - first) // QUARTER + 1)]


def walk(schedule: WallClock, first: datetime, last: datetime) -> list[datetime]:
    """The ticks from first to last, both included, found with next_tick alone."""
    ticks, tick = [], schedule.next_tick(first - MICROSECOND)
    while tick <= last:
        ticks.append(tick)
        tick = schedule.next_tick(tick)
    return ticks


def gaps(ticks: list[datetime]) -> list[timedelta]:
    return [later - earlier for earlier, later in pairwise(ticks)]


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    ("expression", "period"),
    [
        ("0 * * * *", HOUR),
        ("*/15 * * * *", HOUR),  # only the hour field decides
        ("0 */1 * * *", HOUR),
        ("0 */2 * * *", 2 * HOUR),
        ("0 1-23/3 * * *", 3 * HOUR),
        ("0 5/6 * * *", 6 * HOUR),
        ("0 22-2/2 * * *", 2 * HOUR),  # a wrapping range with a step
        ("0 */24 * * *", DAY),  # a step of a whole day leaves one hour a day
        ("*/5 * * * mon-fri", HOUR),
    ],
)
def test_hour_field_of_star_or_a_step_is_a_frequency(expression: str, period: timedelta) -> None:
    assert frequency_period(expression) == period
    assert wallclock({"cron": expression, "timezone": "UTC"}).period == period


@pytest.mark.parametrize(
    "expression",
    [
        "30 1 * * *",
        "0 1-5 * * *",  # a range without a step
        "0 0-23 * * *",  # even when it covers the day: it names the hours
        "0 1,2 * * *",
        "0 */2,3 * * *",  # a list, even one holding a step
        "*/15 9-17 * * mon-fri",
    ],
)
def test_any_other_hour_field_names_wall_times(expression: str) -> None:
    assert frequency_period(expression) is None
    assert wallclock({"cron": expression, "timezone": "UTC"}).period is None


def test_daily_at_names_a_wall_time() -> None:
    assert wallclock({"daily_at": "01:30", "timezone": "America/New_York"}).period is None


# ------------------------------------------------------------- every tick across a transition


@dataclass(frozen=True, kw_only=True)
class Across:
    """Every tick of one schedule around one transition, in order."""

    name: str
    zone: str
    schedule: dict[str, object]
    ticks: list[datetime]
    max_gap: timedelta


ACROSS = [
    # --- America/New_York, fall back 2025-11-02 02:00 EDT -> 01:00 EST (06:00Z).
    Across(
        name="new-york-fall-hourly",
        zone="America/New_York",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 11, 2, 4),  # 00:00 EDT
            utc(2025, 11, 2, 5),  # 01:00 EDT
            utc(2025, 11, 2, 6),  # 01:00 EST, the repeated hour
            utc(2025, 11, 2, 7),  # 02:00 EST
            utc(2025, 11, 2, 8),  # 03:00 EST
        ],
        max_gap=HOUR,
    ),
    Across(
        name="new-york-fall-quarter-hourly",
        zone="America/New_York",
        schedule={"cron": "*/15 * * * *"},
        # 01:00, 01:15, 01:30, 01:45 EDT (05:00-05:45Z), the same again in EST (06:00-06:45Z),
        # then 02:00 EST (07:00Z).
        ticks=quarters(utc(2025, 11, 2, 5), utc(2025, 11, 2, 7)),
        max_gap=QUARTER,
    ),
    Across(
        name="new-york-fall-fixed",
        zone="America/New_York",
        schedule={"cron": "30 1 * * *"},
        ticks=[
            utc(2025, 11, 1, 5, 30),  # 01:30 EDT
            utc(2025, 11, 2, 5, 30),  # 01:30 EDT, the first occurrence; 06:30Z is not a tick
            utc(2025, 11, 3, 6, 30),  # 01:30 EST
        ],
        max_gap=25 * HOUR,
    ),
    # --- America/New_York, spring forward 2025-03-09 02:00 EST -> 03:00 EDT (07:00Z).
    Across(
        name="new-york-spring-hourly",
        zone="America/New_York",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 3, 9, 5),  # 00:00 EST
            utc(2025, 3, 9, 6),  # 01:00 EST
            utc(2025, 3, 9, 7),  # 03:00 EDT: 02:00 never happens, and this is one hour later
            utc(2025, 3, 9, 8),  # 04:00 EDT
        ],
        max_gap=HOUR,
    ),
    Across(
        name="new-york-spring-quarter-hourly",
        zone="America/New_York",
        schedule={"cron": "*/15 * * * *"},
        # 01:00-01:45 EST (06:00-06:45Z), then 03:00-03:30 EDT (07:00-07:30Z).
        ticks=quarters(utc(2025, 3, 9, 6), utc(2025, 3, 9, 7, 30)),
        max_gap=QUARTER,
    ),
    Across(
        name="new-york-spring-fixed",
        zone="America/New_York",
        schedule={"daily_at": "02:30"},
        ticks=[
            utc(2025, 3, 8, 7, 30),  # 02:30 EST
            utc(2025, 3, 9, 7, 0),  # 02:30 does not exist: the end of the gap, 03:00 EDT
            utc(2025, 3, 10, 6, 30),  # 02:30 EDT
        ],
        max_gap=23 * HOUR + 30 * timedelta(minutes=1),
    ),
    # --- Australia/Lord_Howe, fall back 2025-04-06 02:00 +11 -> 01:30 +10:30 (04-05 15:00Z).
    Across(
        name="lord-howe-fall-quarter-hourly",
        zone="Australia/Lord_Howe",
        schedule={"cron": "*/15 * * * *"},
        # 01:15, 01:30, 01:45 at +11 (14:15-14:45Z), 01:30 and 01:45 again at +10:30
        # (15:00, 15:15Z), then 02:00 and 02:15 at +10:30 (15:30, 15:45Z).
        ticks=quarters(utc(2025, 4, 5, 14, 15), utc(2025, 4, 5, 15, 45)),
        max_gap=QUARTER,
    ),
    Across(
        name="lord-howe-fall-hourly",
        zone="Australia/Lord_Howe",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 4, 5, 13, 0),  # 00:00 +11
            utc(2025, 4, 5, 14, 0),  # 01:00 +11
            # No wall time of the repeated 01:30-02:00 is on the hour, so 02:00 +10:30 would come
            # 90 minutes after 01:00 +11. The old clock's 02:00 bridges it: 01:30 +10:30.
            utc(2025, 4, 5, 15, 0),
            utc(2025, 4, 5, 15, 30),  # 02:00 +10:30
            utc(2025, 4, 5, 16, 30),  # 03:00 +10:30
        ],
        max_gap=HOUR,
    ),
    Across(
        name="lord-howe-fall-fixed",
        zone="Australia/Lord_Howe",
        schedule={"daily_at": "01:45"},
        ticks=[
            utc(2025, 4, 4, 14, 45),  # 01:45 +11
            utc(2025, 4, 5, 14, 45),  # 01:45 +11, the first occurrence; 15:15Z is not a tick
            utc(2025, 4, 6, 15, 15),  # 01:45 +10:30
        ],
        max_gap=24 * HOUR + 30 * timedelta(minutes=1),
    ),
    # --- Australia/Lord_Howe, spring forward 2025-10-05 02:00 +10:30 -> 02:30 +11 (10-04 15:30Z).
    Across(
        name="lord-howe-spring-quarter-hourly",
        zone="Australia/Lord_Howe",
        schedule={"cron": "*/15 * * * *"},
        # 01:30, 01:45 at +10:30 (15:00, 15:15Z); 02:00 and 02:15 never happen; 02:30, 02:45
        # at +11 (15:30, 15:45Z).
        ticks=quarters(utc(2025, 10, 4, 15, 0), utc(2025, 10, 4, 15, 45)),
        max_gap=QUARTER,
    ),
    Across(
        name="lord-howe-spring-hourly",
        zone="Australia/Lord_Howe",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 10, 4, 13, 30),  # 00:00 +10:30
            utc(2025, 10, 4, 14, 30),  # 01:00 +10:30
            utc(2025, 10, 4, 15, 30),  # 02:00 on the old clock, which reads 02:30 +11
            utc(2025, 10, 4, 16, 0),  # 03:00 +11
        ],
        max_gap=HOUR,
    ),
    Across(
        name="lord-howe-spring-fixed",
        zone="Australia/Lord_Howe",
        schedule={"cron": "15 2 * * *"},
        ticks=[
            utc(2025, 10, 3, 15, 45),  # 02:15 +10:30
            utc(2025, 10, 4, 15, 30),  # 02:15 does not exist: the end of the gap, 02:30 +11
            utc(2025, 10, 5, 15, 15),  # 02:15 +11
        ],
        max_gap=24 * HOUR - 15 * timedelta(minutes=1),
    ),
    # --- Africa/Cairo, fall back Thursday 2025-10-30 24:00 EEST -> 23:00 EET (21:00Z).
    Across(
        name="cairo-fall-hourly",
        zone="Africa/Cairo",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 10, 30, 19),  # 22:00 EEST
            utc(2025, 10, 30, 20),  # 23:00 EEST
            utc(2025, 10, 30, 21),  # 23:00 EET, the repeated hour
            utc(2025, 10, 30, 22),  # Friday 00:00 EET
        ],
        max_gap=HOUR,
    ),
    Across(
        name="cairo-fall-quarter-hourly",
        zone="Africa/Cairo",
        schedule={"cron": "*/15 * * * *"},
        # 23:00-23:45 EEST (20:00-20:45Z), 23:00-23:45 EET (21:00-21:45Z), Friday 00:00 EET.
        ticks=quarters(utc(2025, 10, 30, 20), utc(2025, 10, 30, 22)),
        max_gap=QUARTER,
    ),
    Across(
        name="cairo-fall-fixed",
        zone="Africa/Cairo",
        schedule={"cron": "30 23 * * *"},
        ticks=[
            utc(2025, 10, 29, 20, 30),  # 23:30 EEST
            utc(2025, 10, 30, 20, 30),  # 23:30 EEST, the first occurrence; 21:30Z is not a tick
            utc(2025, 10, 31, 21, 30),  # 23:30 EET
        ],
        max_gap=25 * HOUR,
    ),
    # --- Africa/Cairo, spring forward Friday 2025-04-25 00:00 EET -> 01:00 EEST (04-24 22:00Z).
    Across(
        name="cairo-spring-hourly",
        zone="Africa/Cairo",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 4, 24, 20),  # Thursday 22:00 EET
            utc(2025, 4, 24, 21),  # 23:00 EET
            utc(2025, 4, 24, 22),  # Friday 01:00 EEST: midnight never happens
            utc(2025, 4, 24, 23),  # 02:00 EEST
        ],
        max_gap=HOUR,
    ),
    Across(
        name="cairo-spring-quarter-hourly",
        zone="Africa/Cairo",
        schedule={"cron": "*/15 * * * *"},
        # 23:00-23:45 EET (21:00-21:45Z), then 01:00, 01:15 EEST (22:00, 22:15Z).
        ticks=quarters(utc(2025, 4, 24, 21), utc(2025, 4, 24, 22, 15)),
        max_gap=QUARTER,
    ),
    Across(
        name="cairo-spring-fixed",
        zone="Africa/Cairo",
        schedule={"daily_at": "00:30"},
        ticks=[
            utc(2025, 4, 23, 22, 30),  # Thursday 00:30 EET
            utc(2025, 4, 24, 22, 0),  # Friday's 00:30 does not exist: the end of the gap
            utc(2025, 4, 25, 21, 30),  # Saturday 00:30 EEST
        ],
        max_gap=23 * HOUR + 30 * timedelta(minutes=1),
    ),
    # --- America/Santiago, fall back 2025-04-06 00:00 -03 -> 04-05 23:00 -04 (03:00Z).
    Across(
        name="santiago-fall-hourly",
        zone="America/Santiago",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 4, 6, 1),  # Saturday 22:00 -03
            utc(2025, 4, 6, 2),  # 23:00 -03
            utc(2025, 4, 6, 3),  # 23:00 -04, the repeated hour
            utc(2025, 4, 6, 4),  # Sunday 00:00 -04
        ],
        max_gap=HOUR,
    ),
    Across(
        name="santiago-fall-quarter-hourly",
        zone="America/Santiago",
        schedule={"cron": "*/15 * * * *"},
        # 23:00-23:45 -03 (02:00-02:45Z), 23:00-23:45 -04 (03:00-03:45Z), Sunday 00:00 -04.
        ticks=quarters(utc(2025, 4, 6, 2), utc(2025, 4, 6, 4)),
        max_gap=QUARTER,
    ),
    Across(
        name="santiago-fall-fixed",
        zone="America/Santiago",
        schedule={"daily_at": "23:30"},
        ticks=[
            utc(2025, 4, 5, 2, 30),  # Friday 23:30 -03
            utc(2025, 4, 6, 2, 30),  # Saturday 23:30 -03, the first occurrence; 03:30Z is not
            utc(2025, 4, 7, 3, 30),  # Sunday 23:30 -04
        ],
        max_gap=25 * HOUR,
    ),
    # --- America/Santiago, spring forward 2025-09-07 00:00 -04 -> 01:00 -03 (04:00Z).
    Across(
        name="santiago-spring-hourly",
        zone="America/Santiago",
        schedule={"cron": "0 * * * *"},
        ticks=[
            utc(2025, 9, 7, 2),  # Saturday 22:00 -04
            utc(2025, 9, 7, 3),  # 23:00 -04
            utc(2025, 9, 7, 4),  # Sunday 01:00 -03: midnight never happens
            utc(2025, 9, 7, 5),  # 02:00 -03
        ],
        max_gap=HOUR,
    ),
    Across(
        name="santiago-spring-quarter-hourly",
        zone="America/Santiago",
        schedule={"cron": "*/15 * * * *"},
        # 23:00-23:45 -04 (03:00-03:45Z), then 01:00, 01:15 -03 (04:00, 04:15Z).
        ticks=quarters(utc(2025, 9, 7, 3), utc(2025, 9, 7, 4, 15)),
        max_gap=QUARTER,
    ),
    Across(
        name="santiago-spring-fixed",
        zone="America/Santiago",
        schedule={"cron": "30 0 * * *"},
        ticks=[
            utc(2025, 9, 6, 4, 30),  # Saturday 00:30 -04
            utc(2025, 9, 7, 4, 0),  # Sunday's 00:30 does not exist: the end of the gap
            utc(2025, 9, 8, 3, 30),  # Monday 00:30 -03
        ],
        max_gap=24 * HOUR - 30 * timedelta(minutes=1),
    ),
]


@pytest.mark.parametrize("case", ACROSS, ids=lambda case: case.name)
def test_every_tick_across_a_transition(case: Across) -> None:
    schedule = wallclock({**case.schedule, "timezone": case.zone})
    first, last = case.ticks[0], case.ticks[-1]
    ticks = walk(schedule, first, last)
    assert ticks == case.ticks
    assert max(gaps(ticks)) == case.max_gap
    if schedule.period is not None:
        assert case.max_gap <= schedule.period


@pytest.mark.parametrize("case", ACROSS, ids=lambda case: case.name)
def test_tick_at_and_count_ticks_see_the_same_ticks_across_a_transition(case: Across) -> None:
    schedule = wallclock({**case.schedule, "timezone": case.zone})
    for earlier, later in pairwise(case.ticks):
        assert schedule.tick_at(later) == later
        assert schedule.tick_at(later - MICROSECOND) == earlier
        assert schedule.count_ticks(earlier, later) == 0
    first, last = case.ticks[0], case.ticks[-1]
    assert schedule.count_ticks(first, last) == len(case.ticks) - 2
    assert schedule.count_ticks(first - MICROSECOND, last + MICROSECOND) == len(case.ticks)


# ------------------------------------------------------------------------------ bridges


def test_two_hourly_cron_bridges_the_repeated_hour_it_does_not_name() -> None:
    # New York, 2025-11-02: 00:00 EDT (04:00Z), then 02:00 EST (07:00Z) would be three hours
    # later. The old clock's 02:00 comes at 06:00Z (01:00 EST) and keeps the gap at two hours.
    schedule = wallclock({"cron": "0 */2 * * *", "timezone": "America/New_York"})
    ticks = walk(schedule, utc(2025, 11, 2, 2), utc(2025, 11, 2, 9))
    assert ticks == [
        utc(2025, 11, 2, 2),  # 22:00 EDT
        utc(2025, 11, 2, 4),  # 00:00 EDT
        utc(2025, 11, 2, 6),  # 01:00 EST (02:00 on the old clock)
        utc(2025, 11, 2, 7),  # 02:00 EST
        utc(2025, 11, 2, 9),  # 04:00 EST
    ]


def test_two_hourly_cron_across_spring_forward_fires_the_old_clocks_two_oclock() -> None:
    # New York, 2025-03-09: 00:00 EST (05:00Z); 02:00 never happens, but the old clock reaches
    # it at 07:00Z (03:00 EDT), two hours on; then 04:00 EDT (08:00Z).
    schedule = wallclock({"cron": "0 */2 * * *", "timezone": "America/New_York"})
    ticks = walk(schedule, utc(2025, 3, 9, 5), utc(2025, 3, 9, 10))
    assert ticks == [
        utc(2025, 3, 9, 5),
        utc(2025, 3, 9, 7),
        utc(2025, 3, 9, 8),
        utc(2025, 3, 9, 10),
    ]


def test_half_past_cron_across_spring_forward_keeps_exactly_an_hour() -> None:
    # New York, 2025-03-09: 01:30 EST (06:30Z), then 03:30 EDT (07:30Z). A fixed-hour rule would
    # also fire the skipped 02:30 at the end of the gap (07:00Z), half an hour early.
    schedule = wallclock({"cron": "30 * * * *", "timezone": "America/New_York"})
    ticks = walk(schedule, utc(2025, 3, 9, 5, 30), utc(2025, 3, 9, 8, 30))
    assert ticks == [
        utc(2025, 3, 9, 5, 30),
        utc(2025, 3, 9, 6, 30),
        utc(2025, 3, 9, 7, 30),
        utc(2025, 3, 9, 8, 30),
    ]


def test_weekday_frequency_does_not_bridge_the_weekend() -> None:
    # New York falls back on a Sunday. Friday 23:45 EDT (Saturday 03:45Z) is followed by Monday
    # 00:00 EST (05:00Z): nothing at Sunday 23:00 EST, which is Monday 00:00 on the old clock.
    schedule = wallclock({"cron": "*/15 * * * mon-fri", "timezone": "America/New_York"})
    assert schedule.next_tick(utc(2025, 11, 1, 3, 45)) == utc(2025, 11, 3, 5)
    assert schedule.tick_at(utc(2025, 11, 3, 4, 59)) == utc(2025, 11, 1, 3, 45)


def test_sunday_to_thursday_frequency_does_not_bridge_to_sunday_in_cairo() -> None:
    # Thursday 22:00 EEST (19:00Z) is the last tick of the week; the clocks fall back two hours
    # later (21:00Z), where the old clock's next tick would be Sunday 00:00 EEST (Saturday 23:00
    # EET). That is days, not a period, away: the next tick is Sunday 00:00 EET (Saturday 22:00Z).
    schedule = wallclock({"cron": "0 */2 * * sun-thu", "timezone": "Africa/Cairo"})
    assert schedule.next_tick(utc(2025, 10, 30, 19)) == utc(2025, 11, 1, 22)
    assert schedule.tick_at(utc(2025, 11, 1, 21, 59)) == utc(2025, 10, 30, 19)


def test_friday_frequency_starts_at_fridays_midnight_after_cairo_falls_back() -> None:
    # Thursday 24:00 EEST becomes 23:00 EET (21:00Z): the old clock reads Friday 00:00 there, but
    # Friday has not begun, and a week since the last Friday tick is far more than an hour.
    schedule = wallclock({"cron": "*/15 * * * fri", "timezone": "Africa/Cairo"})
    assert schedule.next_tick(utc(2025, 10, 30, 12)) == utc(2025, 10, 30, 22)  # 00:00 EET


def test_fixed_hour_range_fires_the_repeated_hour_once() -> None:
    # '0 0-23' names every hour, but as wall times: 01:00 fires once, at 01:00 EDT.
    schedule = wallclock({"cron": "0 0-23 * * *", "timezone": "America/New_York"})
    ticks = walk(schedule, utc(2025, 11, 2, 4), utc(2025, 11, 2, 8))
    assert ticks == [
        utc(2025, 11, 2, 4),
        utc(2025, 11, 2, 5),
        utc(2025, 11, 2, 7),
        utc(2025, 11, 2, 8),
    ]


# ------------------------------------------------------------ properties around transitions

TRANSITIONS = [
    ("America/New_York", utc(2025, 3, 9, 7)),
    ("America/New_York", utc(2025, 11, 2, 6)),
    ("Australia/Lord_Howe", utc(2025, 4, 5, 15)),
    ("Australia/Lord_Howe", utc(2025, 10, 4, 15, 30)),
    ("Africa/Cairo", utc(2025, 4, 24, 22)),
    ("Africa/Cairo", utc(2025, 10, 30, 21)),
    ("America/Santiago", utc(2025, 4, 6, 3)),
    ("America/Santiago", utc(2025, 9, 7, 4)),
    ("Europe/London", utc(2025, 10, 26, 1)),
]

FREQUENCIES = [
    "0 * * * *",
    "*/15 * * * *",
    "30 * * * *",
    "45 * * * *",
    "0,10 * * * *",
    "*/20 * * * *",
    "*/45 * * * *",
    "0 */2 * * *",
    "0 1-23/2 * * *",
    "0 */3 * * *",
    "*/15 */2 * * *",
    "*/15 * * * mon-fri",
    "0 */2 * * sun-thu",
]

FIXED = ["30 1 * * *", "0 0-23 * * *", "*/15 1,2 * * *", "30 23 * * *", "0 0 * * *"]


def reference_ticks(expression: str, zone: str, low: datetime, high: datetime) -> list[datetime]:
    """A frequency's ticks in [low, high], computed the slow way, minute by minute of offset."""
    info = ZoneInfo(zone)
    period = frequency_period(expression)
    assert period is not None
    offsets = {
        (low + HOUR * n).astimezone(info).utcoffset() for n in range(int((high - low) / HOUR))
    }
    # Readings: a tick of the clock fixed at one of the zone's offsets, at an instant when the
    # zone really shows that offset.
    readings: set[datetime] = set()
    for offset in offsets:
        assert offset is not None
        walls = croniter(expression, (low + offset).replace(tzinfo=None) - timedelta(minutes=1))
        while (tick := (walls.get_next(datetime) - offset).replace(tzinfo=UTC)) <= high:
            if tick.astimezone(info).utcoffset() == offset:
                readings.add(tick)
    ordered = sorted(readings)
    ticks = set(ordered)
    # Bridges: between two readings, the first reading's clock ticks, each within a period.
    for reading, following in pairwise(ordered):
        offset = reading.astimezone(info).utcoffset()
        assert offset is not None
        if following - reading <= period or following.astimezone(info).utcoffset() == offset:
            continue  # no gap to fill, or no transition: the clock's ticks would be readings
        walls, previous = croniter(expression, (reading + offset).replace(tzinfo=None)), reading
        while (tick := (walls.get_next(datetime) - offset).replace(tzinfo=UTC)) < following:
            if tick - previous > period:
                break
            ticks.add(tick)
            previous = tick
    return sorted(ticks)


@pytest.mark.parametrize("expression", FREQUENCIES)
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS, ids=lambda value: str(value))
def test_frequency_ticks_match_a_brute_force_reference(
    expression: str, zone: str, transition: datetime
) -> None:
    schedule = wallclock({"cron": expression, "timezone": zone})
    window = 4 * HOUR
    expected = [
        tick
        for tick in reference_ticks(
            expression, zone, transition - 12 * HOUR, transition + 12 * HOUR
        )
        if transition - window <= tick <= transition + window
    ]
    assert walk(schedule, transition - window, transition + window) == expected
    if expected and expression.split()[4] == "*":  # a weekend is no gap in its rhythm
        assert max(gaps(expected)) <= (schedule.period or DAY)


@pytest.mark.parametrize("expression", FREQUENCIES + FIXED)
@pytest.mark.parametrize(("zone", "transition"), TRANSITIONS, ids=lambda value: str(value))
def test_tick_at_next_tick_and_count_ticks_agree_at_random_instants(
    expression: str, zone: str, transition: datetime
) -> None:
    schedule = wallclock({"cron": expression, "timezone": zone})
    rng = random.Random(f"{expression} {zone} {transition}")
    for _ in range(4):
        # Whole minutes, odd seconds and microseconds, within six hours of the transition.
        instant = transition + timedelta(
            seconds=rng.randrange(-6 * 3600, 6 * 3600), microseconds=rng.choice([0, 0, 1, 999_999])
        )
        if rng.random() < 0.3:
            instant = instant.replace(second=0, microsecond=0)
        latest, upcoming = schedule.tick_at(instant), schedule.next_tick(instant)
        assert latest <= instant < upcoming
        assert schedule.next_tick(latest) == upcoming
        assert schedule.tick_at(upcoming) == upcoming
        assert schedule.tick_at(upcoming - MICROSECOND) == latest
        assert schedule.count_ticks(latest, upcoming) == 0
        later = instant + timedelta(seconds=rng.randrange(0, 3600))
        assert schedule.count_ticks(instant, later) == len(
            [tick for tick in walk(schedule, instant + MICROSECOND, later) if tick < later]
        )
