"""The wake folder of an embedded database (`.ket/default.db.wake/`): private whatever the umask,
never used through a link or when another user owns it, and then polling still finds the jobs."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.store import JobClaim
from ket.store.sql import SqlStore
from tests.integration.wake_project import Project, migrated_project


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield from migrated_project(tmp_path)


async def _wait_briefly(project: Project) -> tuple[bool, int, list[int]]:
    """A store's wait that nothing wakes; then an enqueue from another process, and the jobs a
    claim finds (what polling does)."""
    store = await SqlStore.open(project.url)
    try:
        woken = await store.wait_for_jobs(["mail"], timeout=0.2)
        job_id = await asyncio.to_thread(project.enqueue_elsewhere, "app.mail")
        claim = JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
        return woken, job_id, [job.id for job in await store.job_claim(claim)]
    finally:
        await store.close()


def test_the_wake_folder_is_0700_and_sockets_0600_under_a_permissive_umask(
    project: Project,
) -> None:
    async def modes() -> tuple[int, list[int]]:
        store = await SqlStore.open(project.url)
        try:
            waiting = asyncio.ensure_future(store.wait_for_jobs(["mail"], timeout=0.2))
            await asyncio.sleep(0)
            folder = project.wake.stat().st_mode & 0o777
            sockets = [(project.wake / n).stat().st_mode & 0o777 for n in project.sockets()]
            await waiting
            return folder, sockets
        finally:
            await store.close()

    old = os.umask(0)
    try:
        folder, sockets = asyncio.run(modes())
    finally:
        os.umask(old)
    assert (folder, sockets) == (0o700, [0o600])


def test_a_link_in_place_of_the_wake_folder_is_never_followed(
    project: Project, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    # a live socket there, named as a waiting process's would be
    planted = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    folder = os.open(elsewhere, os.O_RDONLY)
    try:  # bound through the folder's descriptor: a socket's path has 108 bytes at most
        planted.bind(f"/proc/self/fd/{folder}/1-0123456789abcdef.sock")
    finally:
        os.close(folder)
    planted.setblocking(False)
    project.wake.symlink_to(elsewhere, target_is_directory=True)
    try:
        with caplog.at_level(logging.WARNING):
            woken, job_id, claimed = asyncio.run(_wait_briefly(project))
        with pytest.raises(BlockingIOError):
            planted.recv(100)  # the enqueueing process sent nothing through the link
    finally:
        planted.close()
    assert (woken, claimed) == (False, [job_id])  # polling still finds the job
    assert sorted(p.name for p in elsewhere.iterdir()) == ["1-0123456789abcdef.sock"]
    assert project.wake.is_symlink()
    assert f"wake-ups from other processes are off for {project.wake}" in caplog.text


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_wake_folder_another_user_owns_is_neither_used_nor_written(project: Project) -> None:
    project.wake.mkdir(mode=0o700)
    os.chown(project.wake, 65534, 65534)
    woken, job_id, claimed = asyncio.run(_wait_briefly(project))
    assert (woken, claimed) == (False, [job_id])
    assert list(project.wake.iterdir()) == []
