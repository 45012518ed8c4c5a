"""Fingerprints agree for semantically equal schedules and differ otherwise; tick_key is stable."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ket.schedule import parse_schedule, tick_key


def fingerprint(raw: dict[str, object]) -> str:
    return parse_schedule(raw, default_timezone=None).fingerprint


def test_fingerprint_is_sixteen_lowercase_hex_characters() -> None:
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint({"every": "15m"}))


def test_fingerprints_are_pinned_because_changing_them_churns_every_manifest() -> None:
    # Literal sha256 prefixes of the canonical forms; update only with a manifest migration.
    assert fingerprint({"every": "15m"}) == "f32a8e09ad69c1f1"
    assert fingerprint({"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"}) == (
        "7c063ba8e0767443"
    )


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"every": "900s"}, {"every": "15m"}),
        ({"every": "1h"}, {"every": "60m"}),
        ({"every": "1d"}, {"every": "24h"}),
        (
            {"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"},
            {"cron": "0 3 * * *", "timezone": "Asia/Ho_Chi_Minh"},
        ),
        (
            {"cron": "0 03 * * mon-fri", "timezone": "Europe/London"},
            {"cron": "0 3 * * 1-5", "timezone": "Europe/London"},
        ),
        (
            {"cron": "*/15 * * * *", "timezone": "UTC"},
            {"cron": "0,15,30,45  *  *  *  *", "timezone": "UTC"},
        ),
        ({"cron": "0 3 * * 7", "timezone": "UTC"}, {"cron": "0 3 * * 0", "timezone": "UTC"}),
        # Frequencies with the same hours and the same period.
        ({"cron": "0 */1 * * *", "timezone": "UTC"}, {"cron": "0 * * * *", "timezone": "UTC"}),
        ({"cron": "0 */2 * * *", "timezone": "UTC"}, {"cron": "0 0-23/2 * * *", "timezone": "UTC"}),
    ],
)
def test_semantically_equal_schedules_share_a_fingerprint(
    left: dict[str, object], right: dict[str, object]
) -> None:
    assert fingerprint(left) == fingerprint(right)


def test_default_timezone_and_explicit_timezone_share_a_fingerprint() -> None:
    explicit = fingerprint({"daily_at": "03:00", "timezone": "Europe/London"})
    defaulted = parse_schedule({"daily_at": "03:00"}, default_timezone="Europe/London")
    assert defaulted.fingerprint == explicit


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"every": "15m"}, {"every": "16m"}),
        (
            {"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"},
            {"daily_at": "03:00", "timezone": "Asia/Bangkok"},
        ),
        ({"daily_at": "03:00", "timezone": "UTC"}, {"daily_at": "03:01", "timezone": "UTC"}),
        ({"cron": "0 3 * * 1-5", "timezone": "UTC"}, {"cron": "0 3 * * 1-6", "timezone": "UTC"}),
        # Restricting day-of-month switches cron to 'either day field matches'.
        ({"cron": "0 3 * * 1-5", "timezone": "UTC"}, {"cron": "0 3 1-31 * 1-5", "timezone": "UTC"}),
        # The same hours, once as a frequency and once as wall times: they differ across DST.
        ({"cron": "0 * * * *", "timezone": "UTC"}, {"cron": "0 0-23 * * *", "timezone": "UTC"}),
        (
            {"cron": "0 */12 * * *", "timezone": "UTC"},
            {"cron": "0 0,12 * * *", "timezone": "UTC"},
        ),
    ],
)
def test_different_schedules_have_different_fingerprints(
    left: dict[str, object], right: dict[str, object]
) -> None:
    assert fingerprint(left) != fingerprint(right)


def test_tick_key_is_the_whole_unix_epoch_seconds() -> None:
    assert tick_key(datetime(2025, 1, 1, tzinfo=UTC)) == 1735689600
    assert tick_key(datetime(1970, 1, 1, 0, 0, 1, 500_000, tzinfo=UTC)) == 1


def test_tick_key_is_the_same_for_one_instant_in_any_zone() -> None:
    plus_seven = timezone(timedelta(hours=7))
    assert tick_key(datetime(2025, 1, 1, 7, 0, tzinfo=plus_seven)) == 1735689600


def test_tick_key_rejects_a_naive_datetime_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'2025-01-01T00:00:00'"):
        tick_key(datetime(2025, 1, 1))
