"""`ket jobs list` as an operator runs it on the embedded default: a database that was never
migrated is reported, not created."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Project, Result, run_ket

APP = """
from ket import define_deployment, define_job, define_module

def noop(ctx, input):
    pass

app = define_module(name="app", jobs={
    "ping": define_job(idempotent=True, handler=noop),
    "mail": define_job(idempotent=True, queue="mail", handler=noop),
    "sms": define_job(idempotent=True, queue="sms", handler=noop),
})
main = define_deployment(
    name="main", modules=[app], worker={"queues": {"default": 1, "mail": 1, "sms": 1}}
)
"""


def _listed(root: Path, *args: str) -> list[tuple[int, str]]:
    """The (id, state) of the jobs `ket jobs list ARGS` prints, newest first."""
    done = run_ket("jobs", "list", "--format", "json", *args, cwd=root)
    assert done.code == 0, done.err
    return [(row["id"], row["state"]) for row in json.loads(done.out)]


def _refused(done: Result) -> str:
    """The one line of a refusal (exit 2, no traceback)."""
    assert done.code == 2, done
    assert done.out == ""
    assert "Traceback" not in done.err
    [line] = done.err.splitlines()
    return line


def test_listing_before_migrate_says_to_run_migrate_and_creates_no_database(
    project: Project,
) -> None:
    root = project({"app/workspace.py": APP})
    for command in (("jobs", "list"), ("jobs", "show", "1"), ("jobs", "stats")):
        line = _refused(run_ket(*command, cwd=root))
        assert line.startswith("ket: error: "), line
        assert "run `ket migrate`" in line, line
        assert "default.db" in line, line
        assert not (root / ".ket" / "default.db").exists(), command
    assert run_ket("migrate", cwd=root).code == 0  # the command that may create it
    assert (root / ".ket" / "default.db").is_file()
    assert _listed(root) == []
