"""What the CLI prints and logs, made safe for a terminal and for a log file.

Job names, queues, unique keys, error texts and payloads come from the database, and a manifest
from a pull request: any of them may hold control characters. Printed raw, an escape sequence
reaches the operator's terminal (it can rewrite the screen or the window title) and a newline
forges a line of output or a log record. Everything the CLI prints or logs from such data goes
through `escape`; JSON output escapes every non-ASCII character (`ensure_ascii`).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Sequence
from types import TracebackType
from typing import Any, TextIO

from ket.display import escape
from ket.observe.logs import JsonFormatter, quiet_third_party

__all__ = ["CLIP", "EscapingFormatter", "clip", "configure_logging", "escape", "json_text"]

CLIP = 200

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


def clip(text: str, limit: int = CLIP) -> str:
    """`text`, or its start and its length when it is longer than `limit` characters."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def json_text(value: Any) -> str:
    """`value` as indented JSON with sorted keys, every non-ASCII character escaped."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=True, default=str)


def write_table(rows: Sequence[Sequence[str]], stream: TextIO | None = None) -> None:
    """Rows of cells (escaped already) as columns two spaces apart, each as wide as its widest
    cell, without trailing spaces."""
    out = stream or sys.stdout
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")


def print_json(value: Any) -> None:
    """`value` on standard output as `json_text`, a line of its own."""
    sys.stdout.write(json_text(value) + "\n")


class EscapingFormatter(logging.Formatter):
    """A log formatter after which every record is one line, with no control characters.

    The message (its arguments included) is escaped whole; in a traceback, only the exception
    texts have their line breaks escaped, so the traceback stays readable and still cannot forge a
    record.
    """

    def format(self, record: logging.LogRecord) -> str:
        # another handler may have cached the record's traceback text unescaped: format anew
        cached, record.exc_text = record.exc_text, None
        try:
            return super().format(record)
        finally:
            record.exc_text = cached

    def formatMessage(self, record: logging.LogRecord) -> str:
        values = {
            key: escape(value) if isinstance(value, str) else value
            for key, value in vars(record).items()
        }
        return super().formatMessage(logging.makeLogRecord(values))

    def formatException(self, ei: ExcInfo) -> str:
        _, error, trace = ei
        if error is None:
            return ""
        chunks = traceback.format_exception(type(error), error, trace)
        return "".join(_safe_chunk(chunk) for chunk in chunks).rstrip("\n")

    def formatStack(self, stack_info: str) -> str:
        return escape(stack_info, keep_newlines=True)


def configure_logging(
    level: str, fmt: str, *, log_format: str = "text", third_party: bool = False
) -> None:
    """Log to standard error at `level`: in `fmt` through EscapingFormatter, or as JSON lines
    (`log_format` json); the libraries' loggers at WARNING unless `third_party`."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else EscapingFormatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
    quiet_third_party(opted_in=third_party)


def _safe_chunk(chunk: str) -> str:
    # traceback.format_exception yields the header, one chunk per frame (indented), the chain
    # separators (starting with a newline) and the exception lines (`Type: text`), whose text
    # is the only part an attacker writes; ket's own chunks keep their line breaks.
    if chunk.startswith((" ", "\n", "Traceback ")):
        return escape(chunk, keep_newlines=True)
    return escape(chunk.removesuffix("\n")) + "\n"
