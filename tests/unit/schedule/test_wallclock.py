"""Wall-clock schedules on ordinary days: daily_at and cron ticks, counts and the naive guard."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta

import pytest

from ket.schedule import WallClock, parse_schedule


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def wallclock(raw: dict[str, object]) -> WallClock:
    schedule = parse_schedule(raw, default_timezone=None)
    assert isinstance(schedule, WallClock)
    return schedule


def daily(at: str, zone: str) -> WallClock:
    return wallclock({"daily_at": at, "timezone": zone})


def cron(expression: str, zone: str) -> WallClock:
    return wallclock({"cron": expression, "timezone": zone})


def test_daily_at_tick_at_is_the_latest_local_time_at_or_before_the_instant() -> None:
    # 03:00 in Ho Chi Minh City (+07, no DST) is 20:00Z the day before.
    schedule = daily("03:00", "Asia/Ho_Chi_Minh")
    assert schedule.tick_at(utc(2025, 6, 15, 0, 0)) == utc(2025, 6, 14, 20, 0)
    assert schedule.tick_at(utc(2025, 6, 14, 19, 59, 59)) == utc(2025, 6, 13, 20, 0)


def test_daily_at_tick_instant_is_its_own_tick_and_next_is_one_day_later() -> None:
    schedule = daily("03:00", "Asia/Ho_Chi_Minh")
    assert schedule.tick_at(utc(2025, 6, 14, 20, 0)) == utc(2025, 6, 14, 20, 0)
    assert schedule.next_tick(utc(2025, 6, 14, 20, 0)) == utc(2025, 6, 15, 20, 0)


def test_wall_clock_ticks_are_aware_utc_datetimes() -> None:
    tick = daily("03:00", "Asia/Ho_Chi_Minh").next_tick(utc(2025, 6, 14))
    assert tick.tzinfo is UTC


def test_cron_weekdays_skip_the_weekend() -> None:
    # 09:00 BST is 08:00Z; 2025-06-13 is a Friday and 2025-06-16 a Monday.
    schedule = cron("0 9 * * 1-5", "Europe/London")
    assert schedule.tick_at(utc(2025, 6, 14, 12, 0)) == utc(2025, 6, 13, 8, 0)
    assert schedule.tick_at(utc(2025, 6, 16, 7, 59)) == utc(2025, 6, 13, 8, 0)
    assert schedule.next_tick(utc(2025, 6, 13, 8, 0)) == utc(2025, 6, 16, 8, 0)
    assert schedule.count_ticks(utc(2025, 6, 13, 8, 0), utc(2025, 6, 16, 8, 0)) == 0
    # Thursday's tick to Tuesday's tick skips Friday and Monday only.
    assert schedule.count_ticks(utc(2025, 6, 12, 8, 0), utc(2025, 6, 17, 8, 0)) == 2


def test_cron_with_both_day_fields_restricted_fires_when_either_matches() -> None:
    # Standard cron: '13th of the month OR Friday'. 2025-06-13 and 2025-06-20 are Fridays,
    # 2025-07-13 is a Sunday.
    schedule = cron("0 0 13 * 5", "UTC")
    assert schedule.next_tick(utc(2025, 6, 13)) == utc(2025, 6, 20)
    assert schedule.next_tick(utc(2025, 7, 12)) == utc(2025, 7, 13)


def test_cron_that_fires_every_four_years_finds_its_ticks() -> None:
    schedule = cron("0 0 29 2 *", "UTC")
    assert schedule.next_tick(utc(2025, 1, 1)) == utc(2028, 2, 29)
    assert schedule.tick_at(utc(2025, 1, 1)) == utc(2024, 2, 29)


def test_daily_at_counts_ticks_skipped_during_three_days_of_downtime() -> None:
    schedule = daily("03:00", "Asia/Ho_Chi_Minh")
    last_fired, now = utc(2025, 6, 10, 20, 0), utc(2025, 6, 13, 20, 0)
    assert schedule.count_ticks(last_fired, now) == 2
    assert schedule.count_ticks(last_fired, now + timedelta(seconds=1)) == 3


def test_cron_count_ticks_over_three_days_of_every_quarter_hour() -> None:
    schedule = cron("*/15 * * * *", "Asia/Ho_Chi_Minh")
    assert schedule.count_ticks(utc(2025, 6, 1), utc(2025, 6, 4)) == 3 * 96 - 1


def test_wall_clock_count_ticks_is_zero_for_empty_or_reversed_ranges() -> None:
    schedule = daily("03:00", "UTC")
    assert schedule.count_ticks(utc(2025, 1, 1), utc(2025, 1, 1)) == 0
    assert schedule.count_ticks(utc(2025, 1, 5), utc(2025, 1, 1)) == 0


def test_wall_clock_count_ticks_is_capped_at_limit() -> None:
    schedule = daily("03:00", "UTC")
    assert schedule.count_ticks(utc(2025, 1, 1), utc(2026, 1, 1), limit=7) == 7
    assert schedule.count_ticks(utc(2025, 1, 1), utc(2026, 1, 1)) == 365


def test_wall_clock_count_ticks_rejects_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="-3"):
        daily("03:00", "UTC").count_ticks(utc(2025, 1, 1), utc(2025, 1, 2), limit=-3)


@pytest.mark.parametrize("method", ["tick_at", "next_tick"])
def test_wall_clock_rejects_a_naive_instant_naming_it(method: str) -> None:
    with pytest.raises(ValueError, match=r"timezone-aware.*'2025-01-01T03:00:00'"):
        getattr(daily("03:00", "UTC"), method)(datetime(2025, 1, 1, 3, 0))


def test_wall_clock_count_ticks_rejects_naive_bounds() -> None:
    with pytest.raises(ValueError, match="after"):
        daily("03:00", "UTC").count_ticks(datetime(2025, 1, 1), utc(2025, 1, 2))


def test_every_quarter_hour_across_new_york_spring_gap_goes_on_at_three() -> None:
    # 02:00-02:45 on 2025-03-09 never happen; 03:00 EDT = 07:00Z follows 01:45 EST = 06:45Z.
    schedule = cron("*/15 * * * *", "America/New_York")
    assert schedule.next_tick(utc(2025, 3, 9, 6, 45)) == utc(2025, 3, 9, 7, 0)
    assert schedule.next_tick(utc(2025, 3, 9, 7, 0)) == utc(2025, 3, 9, 7, 15)
    assert schedule.tick_at(utc(2025, 3, 9, 7, 10)) == utc(2025, 3, 9, 7, 0)
    assert schedule.tick_at(utc(2025, 3, 9, 6, 59, 59)) == utc(2025, 3, 9, 6, 45)
    # 06:45, 07:00, 07:15, 07:30, 07:45.
    assert schedule.count_ticks(utc(2025, 3, 9, 6, 30), utc(2025, 3, 9, 8, 0)) == 5
    assert schedule.count_ticks(utc(2025, 3, 9, 6, 45), utc(2025, 3, 9, 7, 15)) == 1


@pytest.mark.parametrize(
    ("start", "end", "irregular"),
    [
        # Spring: 01:45 EST (06:45Z) is followed by 03:00 EDT (07:00Z), 15 minutes later.
        (utc(2025, 3, 8), utc(2025, 3, 11), []),
        # Fall: a frequency fires in both folds, so 01:45 EDT (05:45Z) is followed by 01:00 EST
        # (06:00Z), again 15 minutes later.
        (utc(2025, 11, 1), utc(2025, 11, 4), []),
    ],
)
def test_next_tick_and_tick_at_agree_around_new_york_transitions(
    start: datetime, end: datetime, irregular: list[timedelta]
) -> None:
    schedule = cron("*/15 * * * *", "America/New_York")
    tick, steps = start, []
    while tick < end:
        following = schedule.next_tick(tick)
        assert schedule.tick_at(following) == following
        assert schedule.tick_at(following - timedelta(microseconds=1)) == tick
        steps.append(following - tick)
        tick = following
    assert [step for step in steps if step != timedelta(minutes=15)] == irregular


def test_wall_clock_is_a_frozen_value() -> None:
    schedule = daily("03:00", "UTC")
    assert schedule == WallClock(
        kind="daily_at", text="03:00", expression="0 3 * * *", timezone="UTC"
    )
    with pytest.raises(FrozenInstanceError):
        schedule.timezone = "Europe/London"  # type: ignore[misc]
