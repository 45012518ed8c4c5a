"""`ket workers list` as an operator runs it: reading the control database creates none."""

from __future__ import annotations

from .conftest import Project, run_ket

APP = """
from ket import define_deployment, define_job, define_module

def noop(ctx, input):
    pass

app = define_module(name="app", jobs={"ping": define_job(idempotent=True, handler=noop)})
main = define_deployment(name="main", modules=[app], worker={"queues": {"default": 1}})
"""


def test_listing_workers_before_any_ran_creates_no_database(project: Project) -> None:
    root = project({"app/workspace.py": APP})
    done = run_ket("workers", "list", cwd=root)
    assert done.code == 0, done.err
    assert done.out.startswith("no workers recorded in sqlite:///"), done.out
    assert not (root / ".ket" / "default.db").exists()
    listed = run_ket("workers", "list", "--format", "json", cwd=root)
    assert listed.code == 0, listed.err
    assert not (root / ".ket").exists()
