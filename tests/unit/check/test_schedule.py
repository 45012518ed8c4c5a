"""Schedule checks: parse, at least 10 s apart, valid HH:MM, a named zone, no required input."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_job
from ket.check import run_checks
from ket.declare import DeploymentDecl, JobDecl

from .build import deployment_of, error, handle


class DayInput(BaseModel):
    day: str


def scheduled(schedule: Any, **options: Any) -> JobDecl:
    return define_job(handler=handle, idempotent=True, schedule=schedule, **options)


def shop(job: JobDecl) -> DeploymentDecl:
    return deployment_of(jobs={"tick": job})


# KET201: schedule does not parse


@pytest.mark.parametrize(
    ("schedule", "msg"),
    [
        (
            {"evry": "15m"},
            "schedule has unknown key 'evry'; "
            "allowed keys are 'every', 'daily_at', 'cron' and 'timezone'",
        ),
        (
            {"every": "15m", "cron": "*/15 * * * *"},
            "schedule must have exactly one of 'every', 'daily_at' or 'cron', "
            "got 'every' and 'cron'",
        ),
        (
            {"timezone": "UTC"},
            "schedule must have exactly one of 'every', 'daily_at' or 'cron', got none",
        ),
        ("15m", "schedule must be a mapping such as {'every': '15m'}, got '15m'"),
        (
            ["every", "15m"],
            "schedule must be a mapping such as {'every': '15m'}, got ['every', '15m']",
        ),
        (
            {"every": "15 minutes"},
            "every must be '<count><s|m|h|d>' such as '15m', got '15 minutes'",
        ),
        ({"every": 900}, "schedule every must be a string, got int 900"),
        (
            {"cron": "0 0 * * * *", "timezone": "UTC"},
            "cron must have exactly 5 fields (minute hour day-of-month month day-of-week), "
            "got 6 in '0 0 * * * *'",
        ),
    ],
    ids=[
        "unknown-key",
        "every-and-cron",
        "no-kind",
        "string",
        "list",
        "every-words",
        "every-int",
        "cron-6",
    ],
)
def test_schedule_that_does_not_parse_is_KET201(schedule: Any, msg: str) -> None:
    job = scheduled(schedule)
    assert run_checks(shop(job)) == [error("KET201", msg, obj="job sales.tick", source=job.source)]


@pytest.mark.parametrize(
    ("schedule", "value"),
    [
        ({"every": "61 minutes"}, "61 minutes"),
        ({"cron": "0 0 * * * *", "timezone": "UTC"}, "0 0 * * * *"),
        ({"cron": "61 * * * *", "timezone": "UTC"}, "61 * * * *"),
        ({"cron": "H 3 * * *", "timezone": "UTC"}, "H 3 * * *"),
        ({"every": "1m", "timezone": "Europe/Paris"}, "Europe/Paris"),
        ({"every": "400d"}, "400d"),
        (
            {"cron": "*/99999999999999999999 * * * *", "timezone": "UTC"},
            "*/99999999999999999999 * * * *",
        ),
    ],
)
def test_KET201_message_names_the_offending_value(schedule: dict[str, str], value: str) -> None:
    (finding,) = run_checks(shop(scheduled(schedule)))
    assert finding.id == "KET201"
    assert repr(value) in finding.msg


def test_cron_with_six_fields_is_KET201_and_five_is_silent() -> None:
    six = scheduled({"cron": "0 0 3 * * *", "timezone": "UTC"})
    five = scheduled({"cron": "0 3 * * *", "timezone": "UTC"})
    assert [m.id for m in run_checks(shop(six))] == ["KET201"]
    assert run_checks(shop(five)) == []


@pytest.mark.parametrize(
    "schedule",
    [
        {"every": "15m"},
        {"every": "1d"},
        {"daily_at": "03:00", "timezone": "Asia/Ho_Chi_Minh"},
        {"cron": "*/5 9-17 * * mon-fri", "timezone": "Europe/London"},
    ],
)
def test_schedule_that_parses_is_silent(schedule: dict[str, str]) -> None:
    assert run_checks(shop(scheduled(schedule))) == []


# KET202: every under 10 s


@pytest.mark.parametrize("every", ["1s", "5s", "9s"])
def test_every_under_ten_seconds_is_KET202(every: str) -> None:
    job = scheduled({"every": every})
    assert run_checks(shop(job)) == [
        error(
            "KET202",
            f"every must be at least 10s, got {every!r}",
            obj="job sales.tick",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("every", ["10s", "11s", "1m"])
def test_every_of_ten_seconds_or_more_is_silent(every: str) -> None:
    assert run_checks(shop(scheduled({"every": every}))) == []


# KET203: daily_at is not HH:MM


@pytest.mark.parametrize("text", ["3:00", "24:00", "12:60", "03:00:00", "noon", ""])
def test_daily_at_not_HH_MM_is_KET203(text: str) -> None:
    job = scheduled({"daily_at": text, "timezone": "UTC"})
    assert run_checks(shop(job)) == [
        error(
            "KET203",
            f"daily_at must be 24-hour 'HH:MM', got {text!r}",
            obj="job sales.tick",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("text", ["03:00", "00:00", "23:59", "12:30"])
def test_daily_at_HH_MM_is_silent(text: str) -> None:
    assert run_checks(shop(scheduled({"daily_at": text, "timezone": "UTC"}))) == []


# KET204: unknown timezone


def test_unknown_timezone_is_KET204() -> None:
    job = scheduled({"daily_at": "03:00", "timezone": "Mars/Olympus"})
    assert run_checks(shop(job)) == [
        error(
            "KET204",
            "unknown timezone 'Mars/Olympus'; use an IANA key such as 'Europe/London'",
            obj="job sales.tick",
            source=job.source,
        )
    ]


def test_misspelt_timezone_is_KET204_suggesting_the_zone() -> None:
    job = scheduled({"cron": "0 3 * * *", "timezone": "Europe/Lndon"})
    assert run_checks(shop(job)) == [
        error(
            "KET204",
            "unknown timezone 'Europe/Lndon'; did you mean 'Europe/London'?",
            obj="job sales.tick",
            source=job.source,
        )
    ]


def test_unknown_KET_TIMEZONE_default_is_KET204_naming_the_variable() -> None:
    job = scheduled({"daily_at": "03:00"})
    (finding,) = run_checks(shop(job), timezone="Mars/Olympus")
    assert (finding.id, finding.source) == ("KET204", job.source)
    assert "'Mars/Olympus' (from KET_TIMEZONE)" in finding.msg


def test_known_timezone_is_silent() -> None:
    job = scheduled({"daily_at": "03:00", "timezone": "Europe/London"})
    assert run_checks(shop(job)) == []


# KET205: wall-clock schedule with no timezone


@pytest.mark.parametrize(
    ("schedule", "kind"), [({"daily_at": "03:00"}, "daily_at"), ({"cron": "0 3 * * *"}, "cron")]
)
def test_wall_clock_schedule_without_timezone_or_default_is_KET205(
    schedule: dict[str, str], kind: str
) -> None:
    job = scheduled(schedule)
    assert run_checks(shop(job), timezone=None) == [
        error(
            "KET205",
            f"{kind} schedule has no timezone: add 'timezone' (e.g. 'Europe/London') "
            "to the schedule or set KET_TIMEZONE",
            obj="job sales.tick",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("schedule", [{"daily_at": "03:00"}, {"cron": "0 3 * * *"}])
def test_wall_clock_schedule_with_KET_TIMEZONE_default_is_silent(
    schedule: dict[str, str],
) -> None:
    assert run_checks(shop(scheduled(schedule)), timezone="Europe/Oslo") == []


def test_every_schedule_needs_no_timezone() -> None:
    assert run_checks(shop(scheduled({"every": "15m"})), timezone=None) == []


def test_schedule_timezone_wins_over_an_unknown_default() -> None:
    job = scheduled({"daily_at": "03:00", "timezone": "Asia/Tokyo"})
    assert run_checks(shop(job), timezone="Mars/Olympus") == []


# KET206: scheduled job with required input


def test_scheduled_job_with_required_input_is_KET206() -> None:
    job = scheduled({"every": "1h"}, input={"day": "date", "area": "string", "note": "string?"})
    assert run_checks(shop(job)) == [
        error(
            "KET206",
            "scheduled job requires input field(s) area, day",
            obj="job sales.tick",
            source=job.source,
        )
    ]


def test_scheduled_job_with_pydantic_input_requiring_a_field_is_KET206() -> None:
    job = scheduled({"every": "1h"}, input=DayInput)
    assert [(m.id, m.msg) for m in run_checks(shop(job))] == [
        ("KET206", "scheduled job requires input field(s) day")
    ]


def test_scheduled_job_with_optional_input_is_silent() -> None:
    job = scheduled({"every": "1h"}, input={"day": "date?", "area": "string?"})
    assert run_checks(shop(job)) == []


def test_unscheduled_job_with_required_input_is_silent() -> None:
    job = define_job(handler=handle, idempotent=True, input={"day": "date"})
    assert run_checks(shop(job)) == []


def test_scheduled_job_with_uncompilable_input_is_KET501_only() -> None:
    job = scheduled({"every": "1h"}, input={"day": "dat"})
    assert [m.id for m in run_checks(shop(job))] == ["KET501"]


# KET207: schedule never fires


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *"])
def test_cron_that_never_fires_is_KET207(cron: str) -> None:
    job = scheduled({"cron": cron, "timezone": "UTC"})
    assert run_checks(shop(job)) == [
        error(
            "KET207",
            f"cron can never fire, got {cron!r} (no date matches its day and month fields)",
            obj="job sales.tick",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("cron", ["0 0 28 2 *", "0 0 29 2 *", "0 0 30 4 *"])
def test_cron_that_fires_on_some_date_is_silent(cron: str) -> None:
    assert run_checks(shop(scheduled({"cron": cron, "timezone": "UTC"}))) == []
