"""`ket check`: pure checks over declarations, returning Django-style findings."""

from ket.check import (  # noqa: F401 - register
    effect,
    flow,
    model,
    names,
    operation,
    schedule,
    serve,
    worker,
)
from ket.check.code import CODES, Code
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
