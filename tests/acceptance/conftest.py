"""Run the `ket` command as a user runs it: a separate process, in a project folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


def run_ket(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> Result:
    """Run `python -m ket.cli.main ARGS` in `cwd`; never raises on a non-zero exit."""
    environment = {k: v for k, v in os.environ.items() if k != "KET_TIMEZONE"}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-m", "ket.cli.main", *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return Result(done.returncode, done.stdout, done.stderr)


Project = Callable[[dict[str, str]], Path]


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """Write a project (path -> source) whose pyproject.toml points at app/workspace.py."""

    def make(files: dict[str, str]) -> Path:
        files = {
            "pyproject.toml": '[tool.ket]\nworkspace = "app/workspace.py"\n',
            "app/__init__.py": "",
            **files,
        }
        for name, source in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
        return tmp_path

    return make
