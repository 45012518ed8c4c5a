"""The wall-time -> instant rule: once-only times, fall-back overlaps and spring-forward gaps."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from ket.schedule.localtime import wall_time, wall_to_instant


def utc(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


NEW_YORK = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")


def test_wall_time_that_exists_once_maps_to_that_instant() -> None:
    assert wall_to_instant(datetime(2025, 7, 1, 9, 0), NEW_YORK) == utc(2025, 7, 1, 13, 0)
    assert wall_to_instant(datetime(2025, 1, 15, 9, 0), NEW_YORK) == utc(2025, 1, 15, 14, 0)


def test_wall_time_in_fall_back_overlap_maps_to_its_first_occurrence() -> None:
    # 01:30 on 2025-11-02 happens at 05:30Z (EDT) and again at 06:30Z (EST).
    assert wall_to_instant(datetime(2025, 11, 2, 1, 30), NEW_YORK) == utc(2025, 11, 2, 5, 30)


@pytest.mark.parametrize(
    "wall",
    [datetime(2025, 3, 9, 2, 0), datetime(2025, 3, 9, 2, 30), datetime(2025, 3, 9, 2, 59, 59)],
)
def test_wall_time_in_spring_forward_gap_maps_to_the_transition_instant(wall: datetime) -> None:
    # 02:00-03:00 does not exist; the gap ends at 03:00 EDT = 07:00Z.
    assert wall_to_instant(wall, NEW_YORK) == utc(2025, 3, 9, 7, 0)


def test_wall_time_in_thirty_minute_gap_maps_to_the_transition_instant() -> None:
    # Lord Howe 2025-10-05 02:00 (+10:30) jumps to 02:30 (+11): the gap ends at 15:30Z.
    assert wall_to_instant(datetime(2025, 10, 5, 2, 15), LORD_HOWE) == utc(2025, 10, 4, 15, 30)


def test_wall_time_in_thirty_minute_overlap_maps_to_its_first_occurrence() -> None:
    # Lord Howe 2025-04-06 02:00 (+11) falls back to 01:30 (+10:30); 01:45 first happens at +11.
    assert wall_to_instant(datetime(2025, 4, 6, 1, 45), LORD_HOWE) == utc(2025, 4, 5, 14, 45)


def test_wall_time_reads_the_local_clock_without_zone_or_fold() -> None:
    second_one_thirty = wall_time(utc(2025, 11, 2, 6, 30), NEW_YORK)
    assert second_one_thirty == datetime(2025, 11, 2, 1, 30)
    assert second_one_thirty.tzinfo is None
    assert second_one_thirty.fold == 0
