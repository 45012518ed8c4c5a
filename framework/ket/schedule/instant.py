"""Instants: the aware-datetime guard and the Unix-epoch arithmetic every schedule shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""The Unix epoch, the origin every tick is measured from."""

_SECOND = timedelta(seconds=1)
_MICROSECOND = timedelta(microseconds=1)


def require_aware(value: datetime, name: str) -> datetime:
    """Return value converted to UTC; raise ValueError naming it if it is naive."""
    # A naive datetime has no single instant; guessing the server zone is exactly the bug
    # schedules must not have, so refuse instead of assuming.
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{name} must be a timezone-aware datetime, got naive {value.isoformat()!r}"
        )
    return value.astimezone(UTC)


def epoch_seconds(instant: datetime) -> int:
    """Whole seconds since the epoch, floored, for an aware datetime."""
    # timedelta // timedelta is exact integer arithmetic; .timestamp() would go through a float.
    return (instant - EPOCH) // _SECOND


def epoch_microseconds(instant: datetime) -> int:
    """Microseconds since the epoch, exactly, for an aware datetime."""
    return (instant - EPOCH) // _MICROSECOND


def from_epoch_seconds(seconds: int) -> datetime:
    """The aware UTC datetime that many whole seconds after the epoch."""
    return EPOCH + timedelta(seconds=seconds)


def tick_key(tick: datetime) -> int:
    """Stable identity of a tick: its whole Unix epoch seconds."""
    return epoch_seconds(require_aware(tick, "tick"))
