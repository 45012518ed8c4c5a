"""`ket jobs enqueue` and `ket jobs rerun` wake a waiting worker as any client enqueue does:
on the embedded SQLite store the wait polls once an hour, so a job that runs was woken."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.wake_project import Project, migrated_project, until, woken_by


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield from migrated_project(tmp_path)


def test_an_operator_enqueue_wakes_a_waiting_store(project: Project) -> None:
    enqueue = ("-m", "ket.cli.main", "jobs", "enqueue", "app.mail")
    assert asyncio.run(woken_by(project, "mail", enqueue)) is True
    assert project.state(1) == "available"


def test_a_worker_polling_hourly_runs_what_an_operator_enqueues_and_reruns(
    project: Project,
) -> None:
    project.start_worker()
    until(lambda: len(project.sockets()) == 1, "the worker's wake socket", project)
    done = project.ket("jobs", "enqueue", "app.work", '{"n": 1}')
    assert done.stdout == "enqueued job 1 (app.work)\n", done.stderr
    until(lambda: project.state(1) == "completed", "the enqueued job", project)
    rerun = project.ket("jobs", "rerun", "1")
    assert rerun.stdout == "job 1 rerun as job 2\n", rerun.stderr
    until(lambda: project.state(2) == "completed", "the rerun", project)
    project.stop()
    assert sorted(p.name for p in (project.root / "runs").iterdir()) == ["1", "2"]
