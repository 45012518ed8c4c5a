"""CheckMessage: rendering for people and JSON for machines; error filter and summary."""

from __future__ import annotations

import os

from ket.check import CheckMessage, Level, error_messages, summary
from ket.declare import SourceLocation

HERE = SourceLocation(file=os.path.join(os.getcwd(), "app", "workspace.py"), line=12)


def message(level: Level = Level.ERROR, *, hint: str | None = "Do this.") -> CheckMessage:
    return CheckMessage(
        id="KET101", level=level, msg="it is wrong", hint=hint, obj="job app.ping", source=HERE
    )


def test_render_shows_relative_file_line_id_level_object_message_and_hint() -> None:
    expected = os.path.join("app", "workspace.py")
    assert message().render() == (
        f"{expected}:12: KET101 error: job app.ping: it is wrong\n    hint: Do this."
    )


def test_render_without_hint_or_object_is_one_line() -> None:
    bare = CheckMessage(id="KET402", level=Level.WARNING, msg="m", source=HERE)
    assert bare.render() == f"{os.path.join('app', 'workspace.py')}:12: KET402 warning: m"


def test_to_json_splits_file_and_line() -> None:
    assert message().to_json() == {
        "id": "KET101",
        "level": "error",
        "object": "job app.ping",
        "file": os.path.join("app", "workspace.py"),
        "line": 12,
        "message": "it is wrong",
        "hint": "Do this.",
    }


def test_error_messages_keeps_errors_and_worse() -> None:
    error, warning, critical = (
        message(Level.ERROR),
        message(Level.WARNING),
        message(Level.CRITICAL),
    )
    assert error_messages([warning, error, critical]) == [error, critical]


def test_summary_counts_by_level() -> None:
    assert summary([]) == "no issues"
    assert summary([message(), message(), message(Level.WARNING)]) == "2 errors, 1 warning"
    assert summary([message(Level.CRITICAL)]) == "1 error"
