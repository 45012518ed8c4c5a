"""Durations: `<count><s|m|h|d>`, the one grammar of `every` schedules, `run_in` delays and the
CLI's `--older-than` and `--run-in`."""

from __future__ import annotations

import re

# The digit cap only keeps int() away from absurd inputs; each user bounds the value itself.
_DURATION = re.compile(r"([0-9]{1,20})([smhd])")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}


def duration_seconds(text: str) -> int | None:
    """A duration such as '90s', '5m', '2h' or '1d' in whole seconds; None when `text` is not
    one (no sign, no fraction, no space, one unit)."""
    match = _DURATION.fullmatch(text)
    if match is None:
        return None
    return int(match.group(1)) * UNIT_SECONDS[match.group(2)]
