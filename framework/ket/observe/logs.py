"""Logs for machines: one JSON object a line; and third-party loggers kept at WARNING.

A line of `--log-format json`:

    {"time": "2026-12-02T12:26:41.193Z", "level": "INFO", "logger": "ket.jobs",
     "message": "failed tenant=default job_id=3 ...", "kind": "failed", "tenant": "default",
     "job_id": 3, "name": "sales.send_confirmation", "queue": "mail", "attempt": 1,
     "duration_ms": 34.167, "error": "ConnectionRefusedError: ..."}

(on one line). The fields after `message` are the record's structured fields, `record.ket`: what
lifecycle events and `ctx.log` attach, and nothing else of the record (so no stray `extra=`
value can carry a secret into the log); a field named like one of the first four keeps its value
as `field_<name>`. An exception is a `traceback` string. Every character outside ASCII is
escaped, so no value can break the line or reach a terminal raw.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

# Loggers of the libraries ket runs on: chatty at DEBUG (aiosqlite logs every call), and not
# what an operator of ket asks for with --log-level DEBUG.
THIRD_PARTY = ("aiosqlite", "asyncio", "sqlalchemy", "psycopg", "uvicorn", "httpx", "httpcore")
# ...but not these: uvicorn's access log is asked for by `--access-log`, off by default
ASKED_FOR_OTHERWISE = ("uvicorn.access",)
CORE = ("time", "level", "logger", "message")


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON: time (UTC), level, logger, message, fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _instant(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(record),
        }
        fields = getattr(record, "ket", None)
        if isinstance(fields, Mapping):
            for key, value in fields.items():
                name = str(key)
                entry[f"field_{name}" if name in CORE else name] = value
        if record.exc_info and record.exc_info[1] is not None:
            entry["traceback"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = record.stack_info
        return _dumps(entry)


def quiet_third_party(*, opted_in: bool) -> None:
    """Keep the THIRD_PARTY loggers at WARNING; opted in (KET_LOG_THIRD_PARTY=1), they follow
    the level of the root logger, as any other logger does."""
    for name in THIRD_PARTY:
        logging.getLogger(name).setLevel(logging.NOTSET if opted_in else logging.WARNING)
    root = logging.getLogger().level
    for name in ASKED_FOR_OTHERWISE:  # the root's level, past their quiet parent's
        logging.getLogger(name).setLevel(logging.NOTSET if opted_in else root)


def _instant(created: float) -> str:
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception as error:  # arguments that do not fit the format: say so, keep the line
        return f"{record.msg!r} (its arguments did not format: {type(error).__name__})"


def _dumps(entry: dict[str, Any]) -> str:
    try:
        return json.dumps(entry, ensure_ascii=True, default=_text, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):  # a field that cannot be JSON: as text
        flat = {key: _text(value) for key, value in entry.items()}
        return json.dumps(flat, ensure_ascii=True, separators=(",", ":"))


def _text(value: object) -> str:
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"
