"""`ket check`: pure checks over declarations, returning Django-style findings."""

from ket.check import effect, model, names, operation, schedule, worker  # noqa: F401 - register
from ket.check.catalog import CODES, Code
from ket.check.message import CheckMessage, Level, error_messages, summary
from ket.check.registry import run_checks, tags

__all__ = [
    "CODES",
    "CheckMessage",
    "Code",
    "Level",
    "error_messages",
    "run_checks",
    "summary",
    "tags",
]
