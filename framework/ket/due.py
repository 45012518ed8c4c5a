"""When an enqueued job is due: at an instant (`run_at`) or after a delay (`run_in`).

Every enqueue path (`ctx.jobs`, the client, the test helpers, `ket jobs enqueue`) passes both
options to `Catalog.new_job`, which reads them here. An instant must say its offset from UTC: a
naive one has no single meaning, and guessing the server's zone is the bug to avoid. A delay is
not turned into an instant here: the store counts it from its own now at the insert (the
database's, or the test clock's), so a producer's wrong clock cannot move the job.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from ket.schedule.duration import duration_seconds
from ket.store.validate import MAX_SECONDS

RunAt = datetime | str
"""An aware datetime, or an ISO-8601 text with an offset: `2026-12-24T09:00:00+01:00`, `...Z`."""

RunIn = timedelta | int | float | str
"""A delay: a timedelta, a number of seconds, or a duration such as `90s`, `5m`, `2h`, `1d`."""


def due(run_at: object, run_in: object) -> tuple[datetime | None, float]:
    """The job's `run_at` (None: now) and its delay in seconds; ValueError naming a bad value."""
    if run_in is None:
        return (None if run_at is None else instant(run_at)), 0.0
    if run_at is not None:
        raise ValueError(f"give run_at or run_in, not both (got {run_at!r} and {run_in!r})")
    return None, delay_seconds(run_in)


def instant(value: object) -> datetime:
    """`value` (an aware datetime, or an ISO-8601 text with an offset) as a datetime."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            parsed = None
        if parsed is None or parsed.utcoffset() is None:
            raise ValueError(
                "run_at must be an ISO-8601 time with an offset, such as "
                f"'2026-12-24T09:00:00+01:00' or '2026-12-24T08:00:00Z', got {_shown(value)}"
            )
        return parsed
    if not isinstance(value, datetime) or value.utcoffset() is None:
        raise ValueError(f"run_at must be a timezone-aware datetime, got {value!r}")
    return value


def delay_seconds(value: object, *, name: str = "run_in", positive: bool = False) -> float:
    """`value` (a timedelta, a number of seconds, or a duration text) in seconds, from 0 (above
    0 if `positive`) to a century; ValueError naming the option `name` and the value."""
    seconds: float | None
    if isinstance(value, str):
        parsed = duration_seconds(value)
        seconds, shown = (None if parsed is None else float(parsed)), _shown(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
        shown = f"a timedelta of {seconds!r} seconds"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds, shown = float(value), repr(value)
    else:
        seconds, shown = None, repr(value)
    if seconds is None or not math.isfinite(seconds):
        raise ValueError(
            f"{name} must be a duration such as '90s', '5m', '2h' or '1d', a number of seconds "
            f"or a timedelta, got {shown}"
        )
    if seconds < 0 or (positive and seconds == 0):
        rule = "must be more than 0 seconds" if positive else "must not be negative"
        raise ValueError(f"{name} {rule}, got {shown}")
    if seconds > MAX_SECONDS:
        raise ValueError(f"{name} must be at most {MAX_SECONDS} seconds (a century), got {shown}")
    return seconds


def _shown(text: str) -> str:
    """`text` quoted, by its first 100 characters when it is longer."""
    return repr(text if len(text) <= 100 else text[:100] + "...")
