"""parse_schedule: the accepted shapes, the timezone rules, and every error with its problem."""

from __future__ import annotations

import re

import pytest

from ket.errors import KetError, ScheduleError
from ket.schedule import Every, WallClock, parse_schedule


def fails(raw: object, *, default_timezone: str | None = None) -> ScheduleError:
    with pytest.raises(ScheduleError) as caught:
        parse_schedule(raw, default_timezone=default_timezone)  # type: ignore[arg-type]
    return caught.value


# --- every ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("15m", 900), ("900s", 900), ("2h", 7200), ("1d", 86400), ("365d", 31536000)],
)
def test_every_parses_count_and_unit_into_seconds(text: str, seconds: int) -> None:
    assert parse_schedule({"every": text}, default_timezone=None) == Every(
        text=text, seconds=seconds
    )


def test_every_ignores_the_default_timezone() -> None:
    schedule = parse_schedule({"every": "15m"}, default_timezone="Europe/London")
    assert schedule == Every(text="15m", seconds=900)


def test_every_with_unparseable_text_is_a_syntax_error_naming_it() -> None:
    error = fails({"every": "15 minutes"})
    assert error.problem == "syntax"
    assert error.message == "every must be '<count><s|m|h|d>' such as '15m', got '15 minutes'"


@pytest.mark.parametrize(
    "text",
    ["", "15", "m", "15M", "15mm", " 15m", "15m ", "1.5h", "-5m", "0m", "015m", "1w", "15m\n"],
)
def test_every_rejects_anything_but_positive_count_and_unit(text: str) -> None:
    error = fails({"every": text})
    assert error.problem == "syntax"
    assert repr(text) in error.message


@pytest.mark.parametrize("text", ["5s", "9s", "1s"])
def test_every_under_ten_seconds_is_too_frequent(text: str) -> None:
    error = fails({"every": text})
    assert error.problem == "too_frequent"
    assert error.message == f"every must be at least 10s, got {text!r}"


def test_every_over_a_year_is_rejected_naming_it() -> None:
    error = fails({"every": "366d"})
    assert error.problem == "syntax"
    assert "'366d'" in error.message


def test_every_with_a_timezone_explains_that_every_ticks_in_utc() -> None:
    error = fails({"every": "15m", "timezone": "Europe/London"})
    assert error.problem == "syntax"
    assert "'Europe/London'" in error.message
    assert "Unix epoch" in error.message
    assert "UTC" in error.message


# --- daily_at ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("03:00", "0 3 * * *"),
        ("00:00", "0 0 * * *"),
        ("07:05", "5 7 * * *"),
        ("23:59", "59 23 * * *"),
    ],
)
def test_daily_at_becomes_a_daily_cron_expression(text: str, expression: str) -> None:
    schedule = parse_schedule(
        {"daily_at": text, "timezone": "Asia/Ho_Chi_Minh"}, default_timezone=None
    )
    assert schedule == WallClock(
        kind="daily_at", text=text, expression=expression, timezone="Asia/Ho_Chi_Minh"
    )


def test_daily_at_out_of_range_hour_is_a_bad_time_naming_it() -> None:
    error = fails({"daily_at": "25:00", "timezone": "UTC"})
    assert error.problem == "bad_time"
    assert error.message == "daily_at must be 24-hour 'HH:MM', got '25:00'"


@pytest.mark.parametrize(
    "text", ["24:00", "03:60", "3:00", "03:0", "0300", "03:00:00", " 03:00", "03.00", "3pm", ""]
)
def test_daily_at_rejects_anything_but_two_digit_24_hour_hh_mm(text: str) -> None:
    error = fails({"daily_at": text, "timezone": "UTC"})
    assert error.problem == "bad_time"
    assert repr(text) in error.message


# --- cron -------------------------------------------------------------------------------------


def test_cron_keeps_what_the_user_wrote_and_normalises_whitespace() -> None:
    schedule = parse_schedule({"cron": "0  3 * *\t1-5", "timezone": "UTC"}, default_timezone=None)
    assert schedule == WallClock(
        kind="cron", text="0  3 * *\t1-5", expression="0 3 * * 1-5", timezone="UTC"
    )


@pytest.mark.parametrize("text", ["0 3 * * * *", "0 0 3 * * * 2025", "0 3 * *", "@daily", ""])
def test_cron_without_exactly_five_fields_is_a_syntax_error(text: str) -> None:
    error = fails({"cron": text, "timezone": "UTC"})
    assert error.problem == "syntax"
    assert "5 fields" in error.message
    assert repr(text) in error.message


@pytest.mark.parametrize(
    "text", ["61 3 * * *", "0 24 * * *", "0 3 0 * *", "0 3 * 13 *", "a b c d e"]
)
def test_cron_that_croniter_rejects_is_a_syntax_error_naming_it(text: str) -> None:
    error = fails({"cron": text, "timezone": "UTC"})
    assert error.problem == "syntax"
    assert repr(text) in error.message


@pytest.mark.parametrize(
    ("text", "field", "step", "size"),
    [
        ("*/99999999999999999999 * * * *", "minute", "99999999999999999999", 60),
        ("0 */25 * * *", "hour", "25", 24),
        ("0 3 1/32 * *", "day-of-month", "32", 31),
        ("0 3 * */13 *", "month", "13", 12),
        ("0 3 * * 1-5/8", "day-of-week", "8", 7),
    ],
)
def test_a_cron_step_past_its_field_s_values_is_a_syntax_error_naming_it(
    text: str, field: str, step: str, size: int
) -> None:
    error = fails({"cron": text, "timezone": "UTC"})
    assert error.problem == "syntax"
    assert f"cron step {step} in the {field} field is more than its {size} values" in error.message
    assert repr(text) in error.message
    for fine in ("*/60 * * * *", "0 */24 * * *", "0 3 */31 * *", "0 3 * */12 *", "0 3 * * */7"):
        assert parse_schedule({"cron": fine, "timezone": "UTC"}, default_timezone=None)


@pytest.mark.parametrize("text", ["H 3 * * *", "0 R * * *", "H(0-29) 3 * * *", "0 3 * * h"])
def test_cron_with_hashed_or_random_fields_is_a_syntax_error(text: str) -> None:
    error = fails({"cron": text, "timezone": "UTC"})
    assert error.problem == "syntax"
    assert repr(text) in error.message


@pytest.mark.parametrize("text", ["0 0 30 2 *", "0 0 31 4,6,9,11 *"])
def test_cron_that_can_never_fire_is_reported_as_never_fires(text: str) -> None:
    error = fails({"cron": text, "timezone": "UTC"})
    assert error.problem == "never_fires"
    assert repr(text) in error.message


@pytest.mark.parametrize(
    "text", ["0 0 29 2 *", "0 9 * * mon-fri", "0 3 L * *", "0 3 * * 5#2", "*/15 * * * *"]
)
def test_cron_accepts_rare_but_possible_and_extended_expressions(text: str) -> None:
    schedule = parse_schedule({"cron": text, "timezone": "UTC"}, default_timezone=None)
    assert schedule.kind == "cron"


# --- timezone ---------------------------------------------------------------------------------


def test_wall_clock_uses_the_given_timezone_over_the_default() -> None:
    schedule = parse_schedule(
        {"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"}, default_timezone="Europe/London"
    )
    assert isinstance(schedule, WallClock)
    assert schedule.timezone == "Asia/Ho_Chi_Minh"


def test_wall_clock_falls_back_to_the_default_timezone() -> None:
    schedule = parse_schedule({"cron": "0 3 * * *"}, default_timezone="Europe/London")
    assert isinstance(schedule, WallClock)
    assert schedule.timezone == "Europe/London"


@pytest.mark.parametrize("raw", [{"daily_at": "03:00"}, {"cron": "0 3 * * *"}])
def test_wall_clock_without_any_timezone_is_no_timezone_not_the_server_zone(
    raw: dict[str, object],
) -> None:
    error = fails(raw, default_timezone=None)
    assert error.problem == "no_timezone"
    assert "'timezone'" in error.message
    assert "KET_TIMEZONE" in error.message


def test_unknown_timezone_is_reported_naming_it() -> None:
    error = fails({"daily_at": "03:00", "timezone": "Asia/Saigonn"})
    assert error.problem == "unknown_timezone"
    assert error.message.startswith("unknown timezone 'Asia/Saigonn'")
    assert "'Asia/Saigon'" in error.message  # the close match is suggested


@pytest.mark.parametrize("zone", ["localtime", "", "asia/ho_chi_minh", "EST5EDT ", "+07:00"])
def test_server_zone_empty_and_non_iana_timezones_are_unknown(zone: str) -> None:
    error = fails({"cron": "0 3 * * *", "timezone": zone})
    assert error.problem == "unknown_timezone"
    assert f"unknown timezone {zone!r}" in error.message


def test_unknown_default_timezone_is_reported_as_coming_from_ket_timezone() -> None:
    error = fails({"daily_at": "03:00"}, default_timezone="Mars/Olympus")
    assert error.problem == "unknown_timezone"
    assert "'Mars/Olympus'" in error.message
    assert "KET_TIMEZONE" in error.message


def test_the_value_is_checked_before_the_timezone() -> None:
    assert fails({"daily_at": "25:00", "timezone": "Nowhere"}).problem == "bad_time"


# --- shape ------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [["every", "15m"], "15m", None, 900])
def test_schedule_that_is_not_a_mapping_is_a_syntax_error_naming_it(raw: object) -> None:
    error = fails(raw)
    assert error.problem == "syntax"
    assert repr(raw) in error.message


def test_unknown_key_is_a_syntax_error_naming_it() -> None:
    error = fails({"daily_at": "03:00", "tz": "UTC"})
    assert error.problem == "syntax"
    assert "'tz'" in error.message


@pytest.mark.parametrize("raw", [{}, {"timezone": "UTC"}])
def test_schedule_without_a_kind_key_is_a_syntax_error(raw: dict[str, object]) -> None:
    error = fails(raw)
    assert error.problem == "syntax"
    assert "'every', 'daily_at' or 'cron'" in error.message


def test_schedule_with_two_kind_keys_is_a_syntax_error_naming_both() -> None:
    error = fails({"every": "15m", "cron": "0 3 * * *"})
    assert error.problem == "syntax"
    assert re.search(r"'every' and 'cron'", error.message)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"every": 15}, "15"),
        ({"daily_at": 300, "timezone": "UTC"}, "300"),
        ({"cron": ["0", "3"], "timezone": "UTC"}, "['0', '3']"),
        ({"daily_at": "03:00", "timezone": 7}, "7"),
    ],
)
def test_non_string_values_are_syntax_errors_naming_them(
    raw: dict[str, object], named: str
) -> None:
    error = fails(raw)
    assert error.problem == "syntax"
    assert named in error.message


def test_schedule_errors_are_ket_errors() -> None:
    assert isinstance(fails({"every": "5s"}), KetError)


# --- describe and manifest --------------------------------------------------------------------


def test_schedules_describe_themselves() -> None:
    def parse(raw: dict[str, object]) -> str:
        return parse_schedule(raw, default_timezone=None).describe()

    assert parse({"every": "15m"}) == "every 15m"
    assert (
        parse({"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"})
        == "daily at 03:00 (Asia/Ho_Chi_Minh)"
    )
    assert (
        parse({"cron": "0 3 * * 1-5", "timezone": "Europe/London"})
        == "cron '0 3 * * 1-5' (Europe/London)"
    )


def test_schedules_render_their_manifest_form() -> None:
    every = parse_schedule({"every": "15m"}, default_timezone=None)
    daily = parse_schedule({"daily_at": "03:00"}, default_timezone="Asia/Ho_Chi_Minh")
    cron = parse_schedule(
        {"cron": "0 3 * * 1-5", "timezone": "Europe/London"}, default_timezone=None
    )
    assert every.to_manifest() == {"every": "15m", "fingerprint": every.fingerprint}
    assert daily.to_manifest() == {
        "daily_at": "03:00",
        "timezone": "Asia/Ho_Chi_Minh",
        "fingerprint": daily.fingerprint,
    }
    assert cron.to_manifest() == {
        "cron": "0 3 * * 1-5",
        "timezone": "Europe/London",
        "fingerprint": cron.fingerprint,
    }


def test_kind_tells_the_schedules_apart() -> None:
    assert parse_schedule({"every": "15m"}, default_timezone=None).kind == "every"
    assert (
        parse_schedule({"daily_at": "03:00", "timezone": "UTC"}, default_timezone=None).kind
        == "daily_at"
    )
    assert (
        parse_schedule({"cron": "0 3 * * *", "timezone": "UTC"}, default_timezone=None).kind
        == "cron"
    )
