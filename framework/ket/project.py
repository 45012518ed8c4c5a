"""Where a project's `.ket/` folder is: at the project root, whichever folder a command runs in.

The root is the nearest folder, at or above the current one, whose pyproject.toml has a
`[tool.ket]` table (where the workspace is declared); without one, the current folder. The
embedded databases, the tenant registry, blobs and the dev outbox default to places under it, so
`ket jobs list` run from `app/handlers/` reads the same `.ket/default.db` as the worker started
at the root, instead of making a new, empty `.ket/` there.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

KET_FOLDER = ".ket"


def project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` (default: the current one) with a pyproject.toml
    declaring `[tool.ket]`, else `start` itself."""
    here = (start or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and _declares_ket(candidate):
            return folder
    return here


def ket_folder(start: Path | None = None) -> Path:
    """The project's `.ket/`, relative to the current folder when it is this one's (`.ket`),
    so that paths ket prints stay short where they always were."""
    folder = project_root(start) / KET_FOLDER
    if start is None:
        return Path(os.path.relpath(folder))
    return folder


def _declares_ket(path: Path) -> bool:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # not ours to judge here: loading the workspace reports it
    tool = data.get("tool")
    return isinstance(tool, dict) and "ket" in tool
