"""Cron expressions: validating them, deriving them from daily_at, and canonicalising them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from croniter import CroniterBadDateError, CroniterError, croniter

from ket.errors import ScheduleError

_DAILY_AT = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])")

# Jenkins-style H (hashed) and R (random) fields pick a value per croniter instance or per
# hash id, so tick_at and next_tick could disagree; no month or day name starts with H or R.
_NONDETERMINISTIC_ITEM = re.compile(r"[HhRr](?:$|[(/])")

# An hour field that says how often rather than at which hours: '*', or one step over '*', a
# range or a start hour ('*/2', '1-23/3', '5/6'). The step is captured; '*' alone means 1.
_FREQUENCY_HOURS = re.compile(r"\*|(?:\*|[0-9]+(?:-[0-9]+)?)/([0-9]+)")

# Each field's name and how many values it has: a step may be at most that.
_FIELDS = (("minute", 60), ("hour", 24), ("day-of-month", 31), ("month", 12), ("day-of-week", 7))

# Any fixed start works for the never-fires probe: with no year field, an expression that
# fires at all fires within a few years of any date; fixed keeps parsing pure.
_PROBE_START = datetime(2000, 1, 1)


def daily_at_expression(text: str) -> str:
    """The 5-field cron expression for a daily_at 'HH:MM', or ScheduleError('bad_time')."""
    match = _DAILY_AT.fullmatch(text)
    if match is None:
        raise ScheduleError(f"daily_at must be 24-hour 'HH:MM', got {text!r}", problem="bad_time")
    hour, minute = (int(part) for part in match.groups())
    return f"{minute} {hour} * * *"


def cron_expression(text: str) -> str:
    """The whitespace-normalised 5-field expression for cron text, or ScheduleError."""
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron must have exactly 5 fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {text!r}",
            problem="syntax",
        )
    for field in fields:
        if any(_NONDETERMINISTIC_ITEM.match(item) for item in field.split(",")):
            raise ScheduleError(
                f"cron must not use hashed (H) or random (R) fields, got {field!r} in {text!r}",
                problem="syntax",
            )
    for field, (name, size) in zip(fields, _FIELDS, strict=True):
        for item in field.split(","):
            _, slash, step = item.partition("/")
            if slash and step.isdigit() and int(step) > size:
                shown = step if len(step) <= 20 else step[:20] + "..."
                raise ScheduleError(
                    f"cron step {shown} in the {name} field is more than its {size} values "
                    f"(a step past them would fire as the first value alone), got {text!r}; "
                    f"use a step of 1 to {size}",
                    problem="syntax",
                )
    expression = " ".join(fields)
    if not croniter.is_valid(expression):
        raise ScheduleError(
            f"cron must be a valid cron expression, got {text!r}{_reason(expression)}",
            problem="syntax",
        )
    try:
        croniter(expression, _PROBE_START).get_next(datetime)
    except CroniterBadDateError:
        raise ScheduleError(
            f"cron can never fire, got {text!r} (no date matches its day and month fields)",
            problem="never_fires",
        ) from None
    return expression


def frequency_period(expression: str) -> timedelta | None:
    """The period of a frequency cron, or None for a cron of wall-clock times.

    A cron whose hour field is `*` or a single step (`*/2`, `1-23/3`, `5/6`) says how often to
    run, not at which hours: it is a frequency, and its period is its hour step (an hour for `*`;
    a day for a step of 24, which leaves one hour a day). Any other hour field names
    wall-clock hours: a number, a range without a step (`1-5`), a list (`1,2`, even one holding a
    step). The rule reads the expression as written (whitespace-normalised), never its
    canonical_cron form, which expands `*/2` into the list of hours it stands for.
    """
    match = _FREQUENCY_HOURS.fullmatch(expression.split()[1])
    if match is None:
        return None
    return timedelta(hours=min(int(match.group(1) or 1), 24))


def _reason(expression: str) -> str:
    # croniter's message says which field is wrong; is_valid alone only says that one is.
    try:
        croniter.expand(expression)
    except CroniterError as error:
        return f" ({error})"
    return ""


def canonical_cron(expression: str) -> str:
    """A spelling-independent form of a valid expression: croniter's own expansion of it."""
    # Expanding makes '0 03 * * mon-fri' and '0 3 * * 1-5' (and '*/15' and '0,15,30,45') one
    # definition, judged by the same parser that computes the ticks.
    try:
        fields, nth_weekdays = croniter.expand(expression)
    except CroniterError:
        return expression  # cannot happen for a validated expression; stay deterministic
    parts = [",".join(str(value) for value in field) for field in fields]
    nth = ",".join(
        f"{weekday}#{n}" for weekday, ns in sorted(nth_weekdays.items()) for n in sorted(ns)
    )
    return " ".join(parts) + (f" {nth}" if nth else "")
