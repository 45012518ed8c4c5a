"""Every schedules: epoch-aligned ticks in UTC, skipped counts, and the aware-instant guard."""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ket.schedule import Every, parse_schedule


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


def every(text: str) -> Every:
    schedule = parse_schedule({"every": text}, default_timezone=None)
    assert isinstance(schedule, Every)
    return schedule


def test_every_tick_at_floors_to_the_epoch_aligned_multiple() -> None:
    assert every("15m").tick_at(utc(2025, 1, 1, 0, 7, 30)) == utc(2025, 1, 1, 0, 0)


def test_every_boundary_instant_is_its_own_tick_and_next_is_one_interval_later() -> None:
    schedule = every("15m")
    assert schedule.tick_at(utc(2025, 1, 1, 0, 15)) == utc(2025, 1, 1, 0, 15)
    assert schedule.next_tick(utc(2025, 1, 1, 0, 15)) == utc(2025, 1, 1, 0, 30)


def test_every_is_aligned_to_the_epoch_not_to_the_hour() -> None:
    # 2025-01-01T00:00Z is epoch 1735689600 = 4132594 * 420 + 120, so 7-minute ticks fall at
    # 23:58 and 00:05 around midnight.
    schedule = every("7m")
    assert schedule.tick_at(utc(2025, 1, 1)) == utc(2024, 12, 31, 23, 58)
    assert schedule.next_tick(utc(2025, 1, 1)) == utc(2025, 1, 1, 0, 5)


def test_every_ignores_sub_second_parts_when_flooring() -> None:
    schedule = every("15m")
    almost = utc(2025, 1, 1, 0, 14, 59, 999_999)
    assert schedule.tick_at(almost) == utc(2025, 1, 1, 0, 0)
    assert schedule.next_tick(almost) == utc(2025, 1, 1, 0, 15)


def test_every_next_tick_just_after_a_tick_is_the_following_tick() -> None:
    schedule = every("10s")
    assert schedule.next_tick(utc(2025, 1, 1, 0, 0, 0, 1)) == utc(2025, 1, 1, 0, 0, 10)


def test_every_accepts_instants_in_any_zone_and_answers_in_utc() -> None:
    # 13:00 at +07:00 is 06:00Z; daily ticks fall on UTC midnight.
    plus_seven = timezone(timedelta(hours=7))
    tick = every("1d").tick_at(datetime(2025, 6, 15, 13, 0, tzinfo=plus_seven))
    assert tick == utc(2025, 6, 15)
    assert tick.tzinfo is UTC


def test_every_works_on_instants_far_apart() -> None:
    assert every("10s").tick_at(utc(1970, 1, 1, 0, 0, 5)) == utc(1970, 1, 1)
    assert every("10s").next_tick(utc(1969, 12, 31, 23, 59, 59)) == utc(1970, 1, 1)
    assert every("1h").tick_at(utc(2100, 1, 1)) == utc(2100, 1, 1)
    assert every("1h").next_tick(utc(2100, 1, 1)) == utc(2100, 1, 1, 1)


@pytest.mark.parametrize(
    ("text", "skipped"),
    [("15m", 3 * 96 - 1), ("1h", 3 * 24 - 1), ("1d", 2), ("10s", 3 * 8640 - 1)],
)
def test_every_counts_ticks_skipped_during_three_days_of_downtime(text: str, skipped: int) -> None:
    last_fired, now = utc(2025, 1, 1), utc(2025, 1, 4)
    assert every(text).count_ticks(last_fired, now) == skipped


def test_every_count_ticks_excludes_both_ends_and_handles_unaligned_bounds() -> None:
    schedule = every("15m")
    assert schedule.count_ticks(utc(2025, 1, 1, 0, 0), utc(2025, 1, 1, 0, 15)) == 0
    assert schedule.count_ticks(utc(2025, 1, 1, 0, 5), utc(2025, 1, 1, 0, 50)) == 3
    assert schedule.count_ticks(utc(2025, 1, 1, 0, 0), utc(2025, 1, 1, 0, 45)) == 2


def test_every_count_ticks_is_zero_for_empty_or_reversed_ranges() -> None:
    schedule = every("15m")
    assert schedule.count_ticks(utc(2025, 1, 1), utc(2025, 1, 1)) == 0
    assert schedule.count_ticks(utc(2025, 1, 2), utc(2025, 1, 1)) == 0


def test_every_count_ticks_is_capped_at_limit() -> None:
    schedule = every("10s")
    assert schedule.count_ticks(utc(2000, 1, 1), utc(2025, 1, 1)) == 100_000
    assert schedule.count_ticks(utc(2025, 1, 1), utc(2025, 1, 4), limit=10) == 10


def test_every_count_ticks_rejects_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="-1"):
        every("15m").count_ticks(utc(2025, 1, 1), utc(2025, 1, 2), limit=-1)


@pytest.mark.parametrize("method", ["tick_at", "next_tick"])
def test_every_rejects_a_naive_instant_naming_it(method: str) -> None:
    with pytest.raises(ValueError, match=r"timezone-aware.*'2025-01-01T03:00:00'"):
        getattr(every("15m"), method)(datetime(2025, 1, 1, 3, 0))


def test_every_count_ticks_rejects_naive_bounds() -> None:
    with pytest.raises(ValueError, match="before"):
        every("15m").count_ticks(utc(2025, 1, 1), datetime(2025, 1, 2))


def test_every_is_a_frozen_value_with_kind_every() -> None:
    schedule = every("15m")
    assert schedule == Every(text="15m", seconds=900)
    assert schedule.kind == "every"
    with pytest.raises(FrozenInstanceError):
        schedule.seconds = 60  # type: ignore[misc]


def test_every_describes_itself_and_renders_its_manifest() -> None:
    schedule = every("15m")
    assert schedule.describe() == "every 15m"
    assert schedule.to_manifest() == {"every": "15m", "fingerprint": schedule.fingerprint}
