"""Turning whatever a handler did into an outcome the store can always write.

A handler can raise anything: an exception whose text holds lone surrogates, NUL bytes or a
megabyte of output, one whose `__str__` itself raises, a `Retry` of infinity seconds, or a
backoff that returns NaN. None of that may reach the store raw: one unwritable outcome would stop
every other outcome of the tenant from being recorded. So every text is made safe and capped,
and every delay is checked and clamped, before a `Settle` is built.

A handler's texts are redacted first (`redact`: the job's secret values hidden, then the
deployment's hook), on the whole raw text, so that no cap can cut a secret in two and leave half
of it. A redaction that fails keeps only the exception's type name, and the outcome is recorded
all the same.
"""

from __future__ import annotations

import math
import re
import traceback
from collections.abc import Callable

from ket.catalog import default_backoff
from ket.secret import NO_REDACTION, Redact

# Caps on what one attempt may write into its job's error history (documented in docs/jobs.md).
ERROR_TEXT_MAX = 4_000
TRACEBACK_MAX = 32_000
# The longest a retry may be put off, whatever Retry(in_seconds=...) or a backoff says: 30 days.
MAX_DELAY_SECONDS = 30 * 86_400.0

# C0 controls but newline and tab, DEL, and C1 controls; NUL is among them (PostgreSQL text
# refuses it outright).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_text(text: str, cap: int) -> str:
    """`text` that any database and terminal accept: lone surrogates and control characters
    escaped (newlines and tabs kept), at most `cap` characters."""
    if not text.isascii() or _CONTROL.search(text):
        # a lone surrogate (bytes decoded with surrogateescape) cannot be encoded as UTF-8
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
        text = _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
    if len(text) > cap:
        cut = len(text) - cap
        text = f"{text[:cap]}... ({cut} more characters cut)"
    return text


def describe(error: BaseException, redact: Redact = NO_REDACTION) -> str:
    """`Type: message`, redacted, safe and capped; just the type when its message cannot be
    read, and the type with "(redaction failed)" when `redact` raises."""
    name = type(error).__name__
    try:
        message = str(error)
    except Exception as problem:  # a __str__ that raises must not lose the outcome
        return f"{name} (its message could not be read: {type(problem).__name__})"
    return redacted(f"{name}: {message}" if message else name, redact, ERROR_TEXT_MAX, name)


def redacted(text: str, redact: Redact, cap: int, fallback: str) -> str:
    """`text` redacted, safe and capped; `fallback (redaction failed)` when `redact` raises."""
    try:
        text = redact(text)
    except Exception:  # the hook's problem must not lose the outcome, nor leak the text
        return f"{fallback} (redaction failed)"
    if not isinstance(text, str):
        return f"{fallback} (redaction failed)"
    return safe_text(text, cap)


def trace_of(error: BaseException, redact: Redact = NO_REDACTION) -> str:
    """The formatted traceback, redacted, safe and capped (the end kept: it names the raising
    line)."""
    try:
        text = "".join(traceback.format_exception(error))
    except Exception as problem:
        text = f"(the traceback could not be formatted: {type(problem).__name__})"
    try:
        text = redact(text)
        if not isinstance(text, str):
            raise TypeError(type(text).__name__)
    except Exception:
        text = f"(the traceback of {type(error).__name__} is withheld: redaction failed)"
    if len(text) > TRACEBACK_MAX:
        text = f"... ({len(text) - TRACEBACK_MAX} characters cut)\n{text[-TRACEBACK_MAX:]}"
    return safe_text(text, TRACEBACK_MAX + 100)


class BadDelay(ValueError):
    """A retry delay that is not a finite, non-negative number of seconds."""


def checked_delay(seconds: object, source: str) -> float:
    """`seconds` as a delay clamped to MAX_DELAY_SECONDS, or BadDelay naming `source`."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise BadDelay(f"{source} must be a number of seconds, got {seconds!r}")
    try:
        value = float(seconds)
    except OverflowError:  # an int too large for a float: as long as allowed, if positive
        if seconds > 0:
            return MAX_DELAY_SECONDS
        raise BadDelay(
            f"{source} must be a non-negative number of seconds, got a negative integer of "
            f"{len(str(seconds)) - 1} digits"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise BadDelay(f"{source} must be a finite, non-negative number of seconds, got {value!r}")
    return min(value, MAX_DELAY_SECONDS)


def backoff_delay(backoff: Callable[[int], float], attempt: int, job: str) -> tuple[float, str]:
    """The job's backoff for `attempt`, checked; a broken backoff falls back to the default.

    Returns the delay and, when the job's backoff could not be used, why (for the history).
    """
    try:
        return checked_delay(backoff(attempt), f"the backoff of {job}"), ""
    except BadDelay as error:
        problem = str(error)
    except Exception as error:
        problem = f"the backoff of {job} raised {describe(error)}"
    return min(default_backoff(attempt), MAX_DELAY_SECONDS), f"; {problem}: used the default"
