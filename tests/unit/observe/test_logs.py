"""`--log-format json`: every record is one line of JSON with time, level, logger, message and
its structured fields; an exception is a `traceback` string; third-party loggers stay quiet."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from ket.observe.logs import THIRD_PARTY, JsonFormatter, quiet_third_party
from ket.runtime.events import Event, Hooks


def record(message: str, *args: object, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("ket.jobs", logging.INFO, __file__, 1, message, args, None)
    made.created = 1_796_313_541.123456  # 2026-12-03T15:59:01.123Z
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_a_lifecycle_event_is_one_json_object_with_its_fields() -> None:
    handler = Capture()
    logger = logging.getLogger("ket.jobs")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)  # setLevel, not .level: it clears the loggers' caches
    try:
        Hooks().emit(
            Event(
                kind="completed",
                tenant="acme",
                job_id=7,
                name="sales.send",
                queue="mail",
                attempt=2,
                duration_ms=1.5,
            )
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    [line] = handler.lines
    entry = json.loads(line)
    assert entry.pop("time").endswith("Z")
    assert entry == {
        "level": "DEBUG",
        "logger": "ket.jobs",
        "message": "completed tenant=acme job_id=7 name=sales.send queue=mail attempt=2 "
        "duration_ms=1.5",
        "kind": "completed",
        "tenant": "acme",
        "job_id": 7,
        "name": "sales.send",
        "queue": "mail",
        "attempt": 2,
        "duration_ms": 1.5,
    }


def test_time_is_utc_with_milliseconds() -> None:
    entry = json.loads(JsonFormatter().format(record("hello")))
    assert entry["time"] == "2026-12-03T15:59:01.123Z"


def test_an_exception_is_a_traceback_string_on_the_same_line() -> None:
    try:
        raise ValueError("bad\nline")
    except ValueError:
        failed = record("it failed", exc_info=sys.exc_info())
    line = JsonFormatter().format(failed)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "it failed"
    assert entry["traceback"].startswith("Traceback (most recent call last):\n")
    assert entry["traceback"].endswith("ValueError: bad\nline")


def test_control_and_non_ascii_characters_are_escaped_and_parse_back() -> None:
    text = "a\x1b[2Jb\u2028c\nd é"
    line = JsonFormatter().format(record("%s", text, ket={"error": text}))
    assert line.isascii() and "\n" not in line and "\x1b" not in line
    entry = json.loads(line)
    assert (entry["message"], entry["error"]) == (text, text)


def test_a_field_named_like_a_core_key_keeps_its_value_beside_it() -> None:
    entry = json.loads(JsonFormatter().format(record("hi", ket={"level": "gold", "time": 3})))
    assert (entry["level"], entry["field_level"], entry["field_time"]) == ("INFO", "gold", 3)


def test_only_the_structured_fields_are_written_not_other_extras() -> None:
    # an `extra=` value of some library (a password, a connection) never reaches the line
    entry = json.loads(JsonFormatter().format(record("hi", password="s3cret", ket={"n": 1})))
    assert "password" not in entry and "s3cret" not in json.dumps(entry)
    assert entry["n"] == 1


def test_values_json_cannot_hold_are_written_as_text() -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd one"

    entry = json.loads(JsonFormatter().format(record("hi", ket={"odd": Odd(), "ids": {1, 2}})))
    assert entry["odd"] == "odd one"
    assert entry["ids"] in ("{1, 2}", "{2, 1}")


def test_a_message_whose_arguments_do_not_format_still_gives_a_line() -> None:
    entry = json.loads(JsonFormatter().format(record("%d items", "many")))
    assert entry["message"] == "'%d items' (its arguments did not format: TypeError)"


@pytest.fixture
def levels() -> Iterator[None]:
    names = ["", *THIRD_PARTY, "uvicorn.access"]
    before = {name: logging.getLogger(name).level for name in names}
    logging.getLogger().setLevel(logging.DEBUG)  # as `--log-level DEBUG` sets it
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("levels")
def test_third_party_loggers_stay_at_warning_at_debug_unless_opted_in() -> None:
    quiet_third_party(opted_in=False)
    assert not logging.getLogger("aiosqlite").isEnabledFor(logging.INFO)
    assert logging.getLogger("sqlalchemy.engine").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("uvicorn.error").getEffectiveLevel() == logging.WARNING
    # --access-log asks for uvicorn's access lines: they follow ket's level
    assert logging.getLogger("uvicorn.access").getEffectiveLevel() == logging.DEBUG
    quiet_third_party(opted_in=True)
    assert logging.getLogger("aiosqlite").getEffectiveLevel() == logging.DEBUG
    assert logging.getLogger("uvicorn.access").getEffectiveLevel() == logging.DEBUG


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
