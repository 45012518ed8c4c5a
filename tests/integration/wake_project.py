"""A project on the embedded SQLite default, and processes that enqueue into it or wait on it:
what the wake-up tests (tests/integration, tests/hostile) share."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

from ket.store.sql import SqlStore

HOUR_MS = 3_600_000

WORKSPACE = f"""
from pathlib import Path
from ket import define_deployment, define_job, define_module

async def work(ctx, input):
    (Path(__file__).parent.parent / "runs" / str(ctx.job.id)).touch()

app = define_module(name="app", jobs={{
    "work": define_job(idempotent=True, input={{"n": "int"}}, handler=work),
    "mail": define_job(idempotent=True, queue="mail", handler=work),
}})
# polls once an hour: a job that runs sooner was woken
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 2, "mail": 1}},
    "poll_min_ms": {HOUR_MS}, "poll_max_ms": {HOUR_MS},
}})
"""

CLIENT = """
import sys
from app.workspace import main
from ket import open_client
with open_client(main) as client:
    print(client.enqueue(sys.argv[1], {} if sys.argv[1] == "app.mail" else {"n": 1}).id)
"""

STORE_INSERT = """
import asyncio, sys
from ket.store import NewJob
from ket.store.sql import SqlStore

async def insert():
    store = await SqlStore.open(sys.argv[1])
    await store.job_insert([NewJob(name="app.mail", queue="mail", payload={})])
    await store.close()

asyncio.run(insert())
"""


class Project:
    """A project folder on the default embedded database, `.ket/default.db`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(WORKSPACE))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
        (root / "runs").mkdir()
        self.database = root / ".ket" / "default.db"
        self.url = f"sqlite:///{self.database}"
        self.wake = root / ".ket" / "default.db.wake"
        self.workers: list[subprocess.Popen[str]] = []

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.root), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        return env

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """A process of its own in the project folder (its URLs relative to it)."""
        return subprocess.run(
            [sys.executable, *argv],
            cwd=self.root,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ket(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("-m", "ket.cli.main", *args)

    def enqueue_elsewhere(self, job: str = "app.mail") -> int:
        """Enqueue with open_client in another process; the job's id."""
        done = self.run("-c", CLIENT, job)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    def start_worker(self) -> subprocess.Popen[str]:
        log = (self.root / f"worker-{len(self.workers)}.log").open("w")
        with log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "WARNING"],
                cwd=self.root,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        self.workers.append(worker)
        return worker

    def sockets(self) -> list[str]:
        return sorted(p.name for p in self.wake.iterdir()) if self.wake.is_dir() else []

    def state(self, job_id: int) -> str:
        with closing(sqlite3.connect(self.database)) as connection:
            [(state,)] = connection.execute("SELECT state FROM ket_jobs WHERE id = ?", (job_id,))
        return str(state)

    def log(self) -> str:
        return "\n".join(
            (self.root / f"worker-{n}.log").read_text(errors="replace")[-3_000:]
            for n in range(len(self.workers))
        )

    def stop(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()


def migrated_project(tmp_path: Path) -> Iterator[Project]:
    """A migrated project in `tmp_path`; its workers are stopped afterwards."""
    made = Project(tmp_path / "shop")
    made.database.parent.mkdir(mode=0o700)
    asyncio.run(_migrate(made.url))
    yield made
    made.stop()


async def _migrate(url: str) -> None:
    store = await SqlStore.open(url, migrate=True)
    await store.close()


def until(condition: Callable[[], bool], what: str, project: Project) -> None:
    # far below the workers' hour-long poll: only a wake-up gets there
    deadline = time.monotonic() + 60
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}:\n{project.log()}")
        time.sleep(0.05)


async def woken_by(project: Project, queue: str, *commands: tuple[str, ...]) -> bool:
    """Wait on `queue` (30 s) in this process while `commands` run, one by one, in others."""
    store = await SqlStore.open(project.url)
    try:
        waiting = asyncio.ensure_future(store.wait_for_jobs([queue], timeout=30))
        await asyncio.sleep(0)  # the wait binds its socket and registers first
        for argv in commands:
            done = await asyncio.to_thread(project.run, *argv)
            assert done.returncode == 0, done.stderr
        return await waiting
    finally:
        await store.close()
