"""`client.wake()` after the application's own commit wakes a worker waiting on the embedded
SQLite store, whose wait polls once an hour; without it ket cannot see that commit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.errors import JobRejected
from tests.integration.wake_project import Project, migrated_project, woken_by

ENQUEUE_ON_OWN_CONNECTION = """
import sys
from sqlalchemy import create_engine
from app.workspace import main
from ket import open_client

engine = create_engine("sqlite:///.ket/default.db")
with open_client(main) as client:
    with engine.connect() as connection:
        client.enqueue("app.mail", connection=connection)
        connection.commit()
    if sys.argv[1] == "wake":
        client.wake(["app.mail"])
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield from migrated_project(tmp_path)


def test_wake_after_the_apps_own_commit_wakes_a_waiting_store(project: Project) -> None:
    command = ("-c", ENQUEUE_ON_OWN_CONNECTION, "wake")
    assert asyncio.run(woken_by(project, "mail", command)) is True
    assert project.state(1) == "available"


def test_wake_refuses_a_job_the_deployment_does_not_declare(project: Project) -> None:
    from ket import define_deployment, define_job, define_module, open_client

    app = define_module(name="app", jobs={"mail": define_job(idempotent=True, handler=print)})
    deployment = define_deployment(name="main", modules=[app])
    with (
        open_client(deployment, database_url=project.url) as client,
        pytest.raises(JobRejected, match=r"app\.nope"),
    ):
        client.wake(["app.nope"])
