"""Time zones: resolving and validating the IANA key a wall-clock schedule runs in."""

from __future__ import annotations

import difflib
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from ket.errors import ScheduleError

# "localtime" can appear on some systems and means the *server's* zone, which a schedule must
# never silently depend on.
_SERVER_ZONE_KEYS = frozenset({"localtime"})


@cache
def _known_keys() -> frozenset[str]:
    # available_timezones() walks tzdata on every call; the set cannot change while we run.
    return frozenset(available_timezones()) - _SERVER_ZONE_KEYS


@cache
def zone_info(key: str) -> ZoneInfo:
    """The ZoneInfo for a key already checked by check_timezone."""
    return ZoneInfo(key)


def check_timezone(key: str, *, source: str = "timezone") -> str:
    """Return key if it is a known IANA zone, else raise ScheduleError('unknown_timezone')."""
    if key in _known_keys():
        return key
    where = "" if source == "timezone" else f" (from {source})"
    message = f"unknown timezone {key!r}{where}"
    guess = difflib.get_close_matches(key, _known_keys(), n=1) if key else []
    if guess:
        message += f"; did you mean {guess[0]!r}?"
    else:
        message += "; use an IANA key such as 'Europe/London'"
    raise ScheduleError(message, problem="unknown_timezone")


def resolve_timezone(given: str | None, default_timezone: str | None, *, kind: str) -> str:
    """The schedule's zone: the given key, else the KET_TIMEZONE default, else an error."""
    if given is not None:
        return check_timezone(given)
    if default_timezone is not None:
        return check_timezone(default_timezone, source="KET_TIMEZONE")
    # Falling back to the server's zone would make the same manifest fire at different
    # instants on different machines, so the zone must always be explicit.
    raise ScheduleError(
        f"{kind} schedule has no timezone: add 'timezone' (e.g. 'Europe/London') "
        "to the schedule or set KET_TIMEZONE",
        problem="no_timezone",
    )
