"""The libraries' console scripts and the environment their processes share."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def script(name: str) -> str:
    """The console script installed next to this interpreter (no shim in front of it, so its
    pid is the worker's own and its start-up is the library's alone)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"console script {name!r} not found; pip install -e '.[bench]'")
    return found


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment, with bench/compare importable and `extra` added."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(HERE) if not path else f"{HERE}{os.pathsep}{path}"
    env.update(extra)
    return env
