"""Where a declaration was made, so `ket check` can point at the line."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class SourceLocation:
    """The file and line of a define_* call."""

    file: str
    line: int

    def render(self, relative_to: str | None = None) -> str:
        """`path:line`, relative to `relative_to` (default: the working directory) if inside."""
        base = relative_to or os.getcwd()
        path = self.file
        try:
            rel = os.path.relpath(path, base)
        except ValueError:  # another drive on Windows
            rel = path
        if not rel.startswith(os.pardir):
            path = rel
        return f"{path}:{self.line}"


UNKNOWN = SourceLocation(file="<unknown>", line=0)


def caller(depth: int = 2) -> SourceLocation:
    """The location of the frame `depth` levels up (2: whoever called the define_* function)."""
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return UNKNOWN
    return SourceLocation(file=frame.f_code.co_filename, line=frame.f_lineno)
