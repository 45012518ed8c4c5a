"""ket: `ket migrate`, `open_async_client`, `ket worker`, and the `ket_jobs` table."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psycopg
from database import Database, count
from executable import child_env, script
from ket_app import JOB, deployment, order
from side import Command, Window

from ket.client import AsyncClient, open_async_client

BEST_CONCURRENCY = 100

# `ket worker --workspace` imports this file; ket_app.py is on PYTHONPATH
_WORKSPACE = """from ket_app import deployment

bench = deployment({concurrency})
"""


def _workspace(folder: Path, concurrency: int | None) -> Path:
    path = folder / f"workspace_{concurrency or 'default'}.py"
    path.write_text(_WORKSPACE.format(concurrency=concurrency), encoding="utf-8")
    return path


def _env(database: Database, folder: Path) -> dict[str, str]:
    # no tenant registry: the single tenant `default` in KET_DATABASE_URL
    registry = f"sqlite:///{folder}/.ket/registry.db"
    return {"KET_DATABASE_URL": database.url, "KET_REGISTRY_URL": registry}


class KetProducer:
    """ket's asyncio client; each job's input an order (ket_app.order), validated."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._sent = 0

    async def enqueue_one(self) -> int:
        self._sent += 1
        return (await self._client.aenqueue(JOB, order(self._sent))).id

    async def enqueue_all(self, jobs: int) -> None:
        await self._client.aenqueue_many([(JOB, order(n)) for n in range(jobs)])

    async def close(self) -> None:
        await self._client.aclose()


class KetSide:
    name = "ket"
    best_label = f"concurrency {BEST_CONCURRENCY}"

    def install(self, database: Database, folder: Path) -> None:
        argv = [script("ket"), "migrate", "--workspace", str(_workspace(folder, None))]
        env = child_env(_env(database, folder))
        subprocess.run(argv, env=env, cwd=folder, check=True, capture_output=True)

    async def producer(self, database: Database, *, concurrency: int = 1) -> KetProducer:
        # one client whatever the callers: its pool is ket's default, as a web app gets it
        client = await open_async_client(deployment(None), database_url=database.url)
        return KetProducer(client)

    def worker(self, database: Database, folder: Path, *, best: bool) -> Command:
        workspace = _workspace(folder, BEST_CONCURRENCY if best else None)
        argv = [script("ket"), "worker", "--workspace", str(workspace)]
        return Command(argv=argv, env=_env(database, folder))

    def queued(self, connection: psycopg.Connection) -> int:
        return count(connection, "SELECT count(*) FROM ket_jobs WHERE state = 'available'")

    def finished(self, connection: psycopg.Connection) -> int:
        return count(connection, "SELECT count(*) FROM ket_jobs WHERE state = 'completed'")

    def window(self, connection: psycopg.Connection) -> Window:
        row = connection.execute(
            "SELECT extract(epoch FROM min(attempted_at)), extract(epoch FROM min(finished_at)),"
            " extract(epoch FROM max(finished_at)) FROM ket_jobs"
        ).fetchone()
        assert row is not None
        return Window(
            first_claim=float(row[0]), first_finish=float(row[1]), last_finish=float(row[2])
        )

    def verify(self, connection: psycopg.Connection, jobs: int) -> None:
        # attempt counts claims: 1 means the job ran once and was never rescued or retried
        total = count(connection, "SELECT count(*) FROM ket_jobs")
        once = count(
            connection,
            "SELECT count(*) FROM ket_jobs WHERE state = 'completed' AND attempt = 1",
        )
        errors = count(connection, "SELECT count(*) FROM ket_job_errors")
        if total != jobs or once != jobs or errors:
            raise RuntimeError(
                f"ket: expected {jobs} jobs each completed once, found {total} jobs, "
                f"{once} completed at attempt 1, {errors} errors"
            )
