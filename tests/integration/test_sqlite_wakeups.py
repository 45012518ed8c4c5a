"""Wake-ups between processes on the embedded SQLite store: a store or a `ket worker` waiting in
one process is woken by a commit in another (a client, a store, the CLI), long before its next
poll; a dead process's socket, or a wake folder that cannot be used, leaves polling working.

Every wait here polls once an hour or times out after 30 s: a wait that returns True, or a job
that runs, was woken. (Links and permissions: tests/hostile/test_wake_folder.py.)"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.store import JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from tests.integration.wake_project import (
    CLIENT,
    STORE_INSERT,
    Project,
    migrated_project,
    until,
    woken_by,
)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield from migrated_project(tmp_path)


def test_a_waiting_store_is_woken_by_a_client_enqueue_in_another_process(
    project: Project,
) -> None:
    assert asyncio.run(woken_by(project, "mail", ("-c", CLIENT, "app.mail"))) is True


# an application's AsyncSession, committed: the async client rings at the session's commit
SESSION = """
import asyncio
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from app.workspace import main
from ket import open_async_client

async def enqueue():
    engine = create_async_engine("sqlite+aiosqlite:///.ket/default.db")
    async with await open_async_client(main) as client:
        async with async_sessionmaker(engine)() as session, session.begin():
            await client.aenqueue("app.mail", {}, connection=session)
    await engine.dispose()

asyncio.run(enqueue())
"""


def test_a_waiting_store_is_woken_when_an_apps_async_session_commits_a_job(
    project: Project,
) -> None:
    assert asyncio.run(woken_by(project, "mail", ("-c", SESSION))) is True


def test_a_waiting_store_is_woken_by_a_store_insert_in_another_process(project: Project) -> None:
    # that process names the file by another path (relative): the wake folder is the same
    woken = asyncio.run(
        woken_by(project, "mail", ("-c", STORE_INSERT, "sqlite:///.ket/default.db"))
    )
    assert woken is True


def test_only_the_waits_on_the_enqueued_queue_are_woken(project: Project) -> None:
    async def scenario() -> tuple[bool, bool]:
        store = await SqlStore.open(project.url)
        try:
            other = asyncio.ensure_future(store.wait_for_jobs(["default"], timeout=30))
            mail = asyncio.ensure_future(store.wait_for_jobs(["mail"], timeout=30))
            await asyncio.sleep(0)
            await asyncio.to_thread(project.enqueue_elsewhere, "app.mail")
            woken = await mail
            await asyncio.sleep(0.1)  # the same datagram would have woken both by now
            still_waiting = not other.done()
            other.cancel()
            return woken, still_waiting
        finally:
            await store.close()

    assert asyncio.run(scenario()) == (True, True)


def test_an_operator_retry_from_the_cli_wakes_a_waiting_store(project: Project) -> None:
    async def discarded() -> int:
        store = await SqlStore.open(project.url)
        try:
            [job] = await store.job_insert([NewJob(name="app.mail", queue="mail", payload={})])
            [claimed] = await store.job_claim(
                JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
            )
            await store.job_settle([Settle(id=job.id, fence=claimed.fence, outcome="discarded")])
            return job.id
        finally:
            await store.close()

    job_id = asyncio.run(discarded())
    retry = ("-m", "ket.cli.main", "jobs", "retry", str(job_id))
    assert asyncio.run(woken_by(project, "mail", retry)) is True
    assert project.state(job_id) == "available"


def test_a_worker_polling_hourly_runs_jobs_enqueued_by_another_process(project: Project) -> None:
    project.start_worker()
    until(lambda: len(project.sockets()) == 1, "the worker's wake socket", project)
    first = project.enqueue_elsewhere("app.work")
    until(lambda: project.state(first) == "completed", "the first job", project)
    # the worker has claimed and finished once and waits again: only a wake-up finds this one
    second = project.enqueue_elsewhere("app.mail")
    until(lambda: project.state(second) == "completed", "the second job", project)
    assert sorted(p.name for p in (project.root / "runs").iterdir()) == sorted(
        [str(first), str(second)]
    )
    project.stop()
    assert [w.returncode for w in project.workers] == [0]
    assert project.sockets() == []  # removed as the worker stopped


def test_a_dead_process_socket_is_removed_and_the_living_are_still_woken(
    project: Project,
) -> None:
    project.wake.mkdir(mode=0o700)
    bind_and_die = (  # bound by a name relative to the folder: a socket path has 108 bytes
        "import os, socket, sys\n"
        "os.chdir(sys.argv[1])\n"
        "socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).bind('99999-0123456789abcdef.sock')\n"
        "os.kill(os.getpid(), 9)\n"
    )
    dead = project.wake / "99999-0123456789abcdef.sock"
    assert project.run("-c", bind_and_die, str(project.wake)).returncode == -9
    assert dead.is_socket()  # left behind by a process that is gone
    assert asyncio.run(woken_by(project, "mail", ("-c", CLIENT, "app.mail"))) is True
    assert not dead.exists()


def test_a_file_in_place_of_the_wake_folder_leaves_polling_working(
    project: Project, caplog: pytest.LogCaptureFixture
) -> None:
    project.wake.write_text("not a folder")

    async def scenario() -> tuple[bool, list[int], int]:
        store = await SqlStore.open(project.url)
        try:
            with caplog.at_level(logging.WARNING):
                waited = await store.wait_for_jobs(["mail"], timeout=0.2)
            job_id = await asyncio.to_thread(project.enqueue_elsewhere, "app.mail")
            claimed = await store.job_claim(
                JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
            )
            return waited, [job.id for job in claimed], job_id
        finally:
            await store.close()

    waited, claimed, job_id = asyncio.run(scenario())
    assert (waited, claimed) == (False, [job_id])  # no wake-up, and polling finds the job
    assert f"wake-ups from other processes are off for {project.wake}" in caplog.text
    assert project.wake.read_text() == "not a folder"
