"""Durable steps against a real kill: a worker SIGKILLed between two steps of a job leaves it to
the next worker, which resumes at the next step. A side-effect table written by each step shows
every step's effect once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.acceptance.conftest import run_ket

from ..processes import terminated

APP = """
import asyncio
import sqlite3
from pathlib import Path
from ket import define_deployment, define_job, define_module

ROOT = Path(__file__).resolve().parent.parent


def effect(name):
    with sqlite3.connect(ROOT / "effects.db") as connection:
        connection.execute("INSERT INTO effects (step) VALUES (?)", (name,))
    return name


async def order(ctx, input):
    await ctx.step("reserve", effect, "reserve")
    await ctx.step("charge", effect, "charge")
    while not (ROOT / "go").exists():   # the first worker is killed here
        await asyncio.sleep(0.05)
    await ctx.step("mail", effect, "mail")


app = define_module(name="app", jobs={"order": define_job(idempotent=True, handler=order)})
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": 1}, "lease_ms": 2000, "poll_max_ms": 200},
)
"""


def _worker(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env={k: v for k, v in os.environ.items() if not k.startswith("KET_")},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _effects(root: Path) -> list[str]:
    with sqlite3.connect(root / "effects.db") as connection:
        return [row[0] for row in connection.execute("SELECT step FROM effects ORDER BY id")]


def _job(root: Path) -> tuple[str, int]:
    with sqlite3.connect(root / ".ket" / "default.db") as connection:
        row = connection.execute("SELECT state, attempt FROM ket_jobs").fetchone()
    return row[0], row[1]


def _wait(condition: object, what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_worker_killed_between_steps_leaves_the_job_to_resume_at_the_next_step(
    tmp_path: Path,
) -> None:
    root = tmp_path
    (root / "app").mkdir()
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "workspace.py").write_text(APP)
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
    with sqlite3.connect(root / "effects.db") as connection:
        connection.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, step TEXT NOT NULL)")
    assert run_ket("migrate", cwd=root).code == 0
    assert run_ket("jobs", "enqueue", "app.order", "{}", cwd=root).code == 0
    first = _worker(root)
    try:
        _wait(lambda: _effects(root) == ["reserve", "charge"], "the first two steps never ran")
        os.kill(first.pid, signal.SIGKILL)
        first.communicate(timeout=10)
    finally:
        first.kill()
    (root / "go").touch()
    second = _worker(root)
    try:  # its lease runs out (2 s), the job is rescued and run again
        _wait(lambda: _job(root)[0] == "completed", "the job never completed", seconds=60)
        output = terminated(second)
    finally:
        second.kill()
    assert _effects(root) == ["reserve", "charge", "mail"]  # each step's effect once
    assert _job(root) == ("completed", 2)
    assert second.returncode == 0, output
