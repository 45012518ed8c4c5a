"""Parsing: turning the mapping a user passes as define_job(schedule=...) into a Schedule."""

from __future__ import annotations

from collections.abc import Mapping

from ket.errors import ScheduleError
from ket.schedule.cron import cron_expression, daily_at_expression
from ket.schedule.every import Every, parse_every
from ket.schedule.wallclock import WallClock
from ket.schedule.zone import resolve_timezone

Schedule = Every | WallClock
"""Any parsed schedule; tell them apart by `.kind`."""

_KIND_KEYS = ("every", "daily_at", "cron")
_ALLOWED_KEYS = frozenset({*_KIND_KEYS, "timezone"})


def parse_schedule(raw: Mapping[str, object], *, default_timezone: str | None) -> Schedule:
    """Parse a schedule mapping; default_timezone is KET_TIMEZONE, used when none is given."""
    if not isinstance(raw, Mapping):
        raise ScheduleError(
            f"schedule must be a mapping such as {{'every': '15m'}}, got {raw!r}",
            problem="syntax",
        )
    unknown = [key for key in raw if key not in _ALLOWED_KEYS]
    if unknown:
        raise ScheduleError(
            f"schedule has unknown key {unknown[0]!r}; "
            "allowed keys are 'every', 'daily_at', 'cron' and 'timezone'",
            problem="syntax",
        )
    kinds = [key for key in _KIND_KEYS if key in raw]
    if len(kinds) != 1:
        found = "none" if not kinds else " and ".join(repr(kind) for kind in kinds)
        raise ScheduleError(
            f"schedule must have exactly one of 'every', 'daily_at' or 'cron', got {found}",
            problem="syntax",
        )
    kind = kinds[0]
    text = _string(raw, kind)
    timezone = _string(raw, "timezone") if "timezone" in raw else None

    if kind == "every":
        if timezone is not None:
            raise ScheduleError(
                f"every schedules take no timezone, got timezone {timezone!r}: every ticks are "
                "aligned to the Unix epoch in UTC, so a timezone has no effect; "
                "use daily_at or cron for wall-clock times",
                problem="syntax",
            )
        return parse_every(text)

    # Check the value before the zone so a typo in both reports the one nearer the user's eye.
    if kind == "daily_at":
        expression = daily_at_expression(text)
        zone = resolve_timezone(timezone, default_timezone, kind=kind)
        return WallClock(kind="daily_at", text=text, expression=expression, timezone=zone)
    expression = cron_expression(text)
    zone = resolve_timezone(timezone, default_timezone, kind=kind)
    return WallClock(kind="cron", text=text, expression=expression, timezone=zone)


def _string(raw: Mapping[str, object], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str):
        raise ScheduleError(
            f"schedule {key} must be a string, got {type(value).__name__} {value!r}",
            problem="syntax",
        )
    return value
