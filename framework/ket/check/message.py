"""Check findings, in the style of Django's system checks."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from ket.declare.source import UNKNOWN, SourceLocation


class Level(IntEnum):
    """Severity of a finding; `ket check --fail-level` compares against it."""

    DEBUG = 10
    INFO = 20
    WARNING = 30
    ERROR = 40
    CRITICAL = 50

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, kw_only=True)
class CheckMessage:
    """One finding: stable id, severity, where, what is wrong, and what to do about it."""

    id: str
    level: Level
    msg: str
    hint: str | None = None
    obj: str = ""
    source: SourceLocation = UNKNOWN

    def render(self) -> str:
        """`file:line: KET101 error: job sales.x: msg` plus an indented hint line."""
        subject = f"{self.obj}: " if self.obj else ""
        text = f"{self.source.render()}: {self.id} {self.level.label}: {subject}{self.msg}"
        return text + (f"\n    hint: {self.hint}" if self.hint else "")

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "level": self.level.label,
            "object": self.obj,
            "file": self.source.render().rsplit(":", 1)[0],
            "line": self.source.line,
            "message": self.msg,
            "hint": self.hint,
        }


def error_messages(messages: Iterable[CheckMessage]) -> list[CheckMessage]:
    """The findings at ERROR level or above."""
    return [m for m in messages if m.level >= Level.ERROR]


def summary(messages: Sequence[CheckMessage]) -> str:
    """`2 errors, 1 warning` or `no issues`."""
    counts: dict[str, int] = {}
    for message in messages:
        label = "error" if message.level >= Level.ERROR else message.level.label
        counts[label] = counts.get(label, 0) + 1
    parts = [f"{n} {label}{'s' if n != 1 else ''}" for label, n in sorted(counts.items())]
    return ", ".join(parts) or "no issues"
