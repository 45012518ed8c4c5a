"""A finished attempt whose outcome waits to be recorded keeps its lease, or is recorded first.

Two tenant workers on one SQLite file, as two worker processes of one machine would be; their
jobs finish while the disk is full (every write fails, reads go on), for eight
leases. Their outcomes wait in the settlers, their leases run out in the database meanwhile.
When writes work again, each worker records its outcomes before any rescue takes a job: no
handler runs twice, and the outcomes are recorded within moments.
"""

from __future__ import annotations

import asyncio
import inspect
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import StoreError
from ket.runtime.contexts import Contexts
from ket.runtime.events import Hooks
from ket.runtime.worker import TenantWorker
from ket.store import JobQuery
from ket.store.sql import SqlStore
from ket.transport import CaptureSender

JOBS = 40
LEASE_MS = 1_500
FULL_SECONDS = 12.0  # eight leases: the old backoffs grew past the leases (all 40 ran twice)
READS = frozenset({"now", "job_get", "job_list", "job_stats", "lease_end", "wait_for_jobs"})

started: Counter[int] = Counter()
finished: Counter[int] = Counter()


async def work(ctx: Any, input: Any) -> None:
    started[ctx.job.id] += 1
    await asyncio.sleep(0.3 if ctx.job.attempt == 1 else 0.01)
    finished[ctx.job.id] += 1


CATALOG = Catalog.build(
    define_deployment(
        name="test",
        modules=[define_module(name="t", jobs={"work": define_job(idempotent=True, handler=work)})],
        worker={
            "queues": {"default": JOBS},
            "poll_min_ms": 20,
            "poll_max_ms": 200,
            "lease_ms": LEASE_MS,
            "schedule_sweep_ms": 60_000,
            "shutdown_grace_ms": 500,
        },
    )
)


class Disk:
    """The disk both handles write to: while `full`, every write fails as SQLite's does."""

    full = False


class OnDisk:
    """A SqlStore whose writes fail while the disk is full (its reads still answer)."""

    def __init__(self, store: SqlStore, disk: Disk) -> None:
        self._store = store
        self._disk = disk

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name in READS or not inspect.iscoroutinefunction(value):
            return value
        disk = self._disk

        async def write(*args: Any, **kwargs: Any) -> Any:
            if disk.full:
                raise StoreError("database error: OperationalError: database or disk is full")
            return await value(*args, **kwargs)

        return write


async def _worker(store: Any, name: str, hooks: Hooks) -> TenantWorker:
    contexts = Contexts(
        store=store,
        catalog=CATALOG,
        tenant="default",
        sender=CaptureSender(),
        storage_root=tempfile.mkdtemp(prefix="ket-test-"),
        hooks=hooks,
    )
    return TenantWorker(
        store=store,
        catalog=CATALOG,
        tenant="default",
        worker_id=name,
        hooks=hooks,
        contexts=contexts,
    )


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def test_jobs_finished_while_the_disk_was_full_run_once_and_are_recorded_at_once(
    tmp_path: Path,
) -> None:
    started.clear()
    finished.clear()

    async def main() -> None:
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        plain = await SqlStore.open(url, migrate=True)
        disk = Disk()
        handles = [await SqlStore.open(url) for _ in range(2)]
        hooks = Hooks()
        kinds: Counter[str] = Counter()
        hooks.subscribe(lambda event: kinds.update([event.kind]))
        workers = [
            await _worker(OnDisk(handle, disk), f"w{i}", hooks) for i, handle in enumerate(handles)
        ]
        for worker in workers:
            worker.start()
        try:
            jobs = await plain.job_insert([CATALOG.new_job("t.work", {}) for _ in range(JOBS)])
            ids = [job.id for job in jobs]

            async def all_started() -> bool:
                return len(started) == JOBS

            await _until(all_started, 10, "every job to start")
            disk.full = True
            await asyncio.sleep(FULL_SECONDS)
            assert sum(finished.values()) == JOBS  # every handler finished while it was full
            disk.full = False
            back = time.monotonic()

            async def all_completed() -> bool:
                records = await plain.job_list(JobQuery())
                return sum(r.state == "completed" for r in records if r.id in ids) == JOBS

            await _until(all_completed, 30, "every job to complete")
            recorded_in = time.monotonic() - back
        finally:
            for worker in workers:
                await worker.stop(grace_seconds=0.5)
            for handle in [*handles, plain]:
                await handle.close()
        twice = sorted(job for job, count in finished.items() if count > 1)
        assert twice == [], f"{len(twice)} of {JOBS} jobs ran twice: {twice}"
        assert kinds["rescued"] == 0 and kinds["lease_lost"] == 0, kinds
        assert kinds["completed"] == JOBS
        assert recorded_in < 2.5, recorded_in

    asyncio.run(main())
