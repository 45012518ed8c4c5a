"""Outcomes made safe: texts any database stores, delays that are finite and clamped."""

from __future__ import annotations

import math

import pytest

from ket.declare.job import default_backoff_seconds
from ket.runtime.outcome import (
    ERROR_TEXT_MAX,
    MAX_DELAY_SECONDS,
    TRACEBACK_MAX,
    BadDelay,
    backoff_delay,
    checked_delay,
    describe,
    safe_text,
    trace_of,
)
from ket.secret import Redactor

LONE_SURROGATE = b"\xff".decode("utf-8", "surrogateescape")  # "\udcff": no UTF-8 for it


class Unreadable(Exception):
    """An exception whose message cannot even be read."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


def raised(error: BaseException) -> BaseException:
    """`error` with a traceback, as a handler's exception reaches the runner."""
    try:
        raise error
    except BaseException as caught:
        return caught


def test_safe_text_escapes_a_lone_surrogate_so_the_text_encodes_as_utf8() -> None:
    text = safe_text(f"bad byte {LONE_SURROGATE} here", 100)
    assert text == "bad byte \\udcff here"
    assert text.encode("utf-8") == b"bad byte \\udcff here"


def test_safe_text_escapes_nul_and_other_control_characters() -> None:
    assert safe_text("a\x00b\x07c\x1bd\x7fe\x85f", 100) == "a\\x00b\\x07c\\x1bd\\x7fe\\x85f"


def test_safe_text_keeps_newlines_tabs_and_printable_unicode() -> None:
    text = "line one\n\tcafé ✓ 東京"
    assert safe_text(text, 100) == text


def test_safe_text_caps_the_length_and_says_how_much_was_cut() -> None:
    assert safe_text("x" * 50, 10) == "x" * 10 + "... (40 more characters cut)"
    assert safe_text("x" * 10, 10) == "x" * 10


def test_safe_text_of_a_hostile_text_is_capped_and_encodes_as_utf8() -> None:
    text = safe_text((LONE_SURROGATE + "\x00") * 10_000, 4_000)
    assert text.startswith("\\udcff\\x00")
    assert text.endswith("more characters cut)")
    assert len(text) < 4_100
    text.encode("utf-8")
    assert "\x00" not in text


def test_describe_gives_type_and_message_made_safe() -> None:
    assert describe(ValueError(f"nul \x00 and {LONE_SURROGATE}")) == (
        "ValueError: nul \\x00 and \\udcff"
    )
    assert describe(ValueError()) == "ValueError"


def test_describe_of_an_exception_whose_str_raises_gives_its_type_name() -> None:
    text = describe(Unreadable())
    assert text == "Unreadable (its message could not be read: RuntimeError)"


def test_describe_caps_a_huge_message() -> None:
    text = describe(ValueError("y" * 1_000_000))
    assert len(text) < 4_100
    assert text.endswith("more characters cut)")


def test_trace_of_a_hostile_exception_names_it_and_encodes_as_utf8() -> None:
    text = trace_of(raised(ValueError(f"{LONE_SURROGATE}\x00")))
    assert text.startswith("Traceback (most recent call last):")
    assert "ValueError: \\udcff\\x00" in text
    text.encode("utf-8")


def test_trace_of_an_unreadable_exception_still_gives_a_traceback() -> None:
    text = trace_of(raised(Unreadable()))
    assert "Unreadable" in text
    assert "raise error" in text


def test_trace_of_a_huge_traceback_keeps_its_end() -> None:
    text = trace_of(raised(ValueError("z" * 100_000 + "THE END")))
    assert len(text) <= TRACEBACK_MAX + 200
    assert text.startswith("... (")
    assert "THE END" in text


@pytest.mark.parametrize(
    "seconds", [math.nan, math.inf, -math.inf, -1, -0.5, "5", True, False, None, [5]]
)
def test_checked_delay_refuses_what_is_not_a_finite_nonnegative_number_naming_the_source(
    seconds: object,
) -> None:
    with pytest.raises(BadDelay) as refused:
        checked_delay(seconds, "Retry(in_seconds=...) from t.job")
    message = str(refused.value)
    assert message.startswith("Retry(in_seconds=...) from t.job must be a ")
    assert ", got " in message  # and names the value


@pytest.mark.parametrize("seconds", [1e30, 10**400, MAX_DELAY_SECONDS + 1, 10**20])
def test_checked_delay_clamps_a_huge_delay_to_the_longest_allowed(seconds: float) -> None:
    assert checked_delay(seconds, "the backoff of t.job") == MAX_DELAY_SECONDS


@pytest.mark.parametrize(("seconds", "expected"), [(0, 0.0), (5, 5.0), (0.25, 0.25)])
def test_checked_delay_keeps_a_sound_delay_as_a_float(seconds: float, expected: float) -> None:
    delay = checked_delay(seconds, "the backoff of t.job")
    assert (delay, type(delay)) == (expected, float)


def test_checked_delay_refuses_a_negative_integer_too_large_for_a_float() -> None:
    with pytest.raises(BadDelay):
        checked_delay(-(10**400), "the backoff of t.job")


def in_default_range(delay: float, attempt: int) -> bool:
    expected = default_backoff_seconds(attempt)
    return 0.9 * expected <= delay <= 1.1 * expected


def test_backoff_delay_uses_a_sound_backoff_as_it_is() -> None:
    assert backoff_delay(lambda attempt: 3.0 * attempt, 2, "t.job") == (6.0, "")


def test_backoff_delay_clamps_a_backoff_of_1e300() -> None:
    assert backoff_delay(lambda attempt: 1e300, 1, "t.job") == (MAX_DELAY_SECONDS, "")


def test_backoff_delay_falls_back_to_the_default_for_a_nan_backoff_saying_why() -> None:
    delay, problem = backoff_delay(lambda attempt: math.nan, 3, "t.job")
    assert in_default_range(delay, 3)
    assert problem == (
        "; the backoff of t.job must be a finite, non-negative number of seconds, got nan: "
        "used the default"
    )


def test_backoff_delay_falls_back_to_the_default_for_a_backoff_that_raises() -> None:
    delay, problem = backoff_delay(lambda attempt: 1 / 0, 2, "t.job")
    assert in_default_range(delay, 2)
    assert problem == (
        "; the backoff of t.job raised ZeroDivisionError: division by zero: used the default"
    )


def test_backoff_delay_falls_back_for_a_backoff_returning_no_number() -> None:
    delay, problem = backoff_delay(lambda attempt: "soon", 1, "t.job")  # type: ignore[arg-type,return-value]
    assert in_default_range(delay, 1)
    assert "got 'soon': used the default" in problem


def test_describe_and_trace_of_hide_the_secrets_a_redactor_knows() -> None:
    redact = Redactor.of(["sk-live-123"], lambda text: text.replace("4111", "<card>"))
    error = raised(ValueError("key sk-live-123 refused for card 4111"))
    assert describe(error, redact) == "ValueError: key *** refused for card <card>"
    trace = trace_of(error, redact)
    assert "ValueError: key *** refused for card <card>" in trace
    assert "sk-live-123" not in trace
    assert "4111" not in trace


def test_a_secret_is_hidden_before_the_cap_so_no_part_of_it_is_left() -> None:
    secret = "S" * 20
    cut_inside = "x" * (ERROR_TEXT_MAX - len("ValueError: ") - 10) + secret
    text = describe(raised(ValueError(cut_inside)), Redactor.of([secret]))
    assert "S" not in text.split(": ", 1)[1]


def test_a_failing_redact_hook_leaves_the_type_name_and_says_so() -> None:
    def broken(text: str) -> str:
        raise KeyError(text)  # its message would quote the text

    error = raised(ValueError("card 4111"))
    assert describe(error, Redactor.of([], broken)) == "ValueError (redaction failed)"
    trace = trace_of(error, Redactor.of([], broken))
    assert trace == "(the traceback of ValueError is withheld: redaction failed)"


def test_a_redact_hook_returning_no_string_counts_as_failed() -> None:
    def silent(text: str) -> str:
        return None  # type: ignore[return-value]

    assert describe(raised(ValueError("card 4111")), silent) == "ValueError (redaction failed)"
