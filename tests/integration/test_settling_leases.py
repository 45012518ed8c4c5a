"""Jobs that finished while writes failed run once: their outcomes are recorded before a rescue.

Two tenant workers on one SQLite file, as two worker processes of one machine would be. Worker 0
claims all 40 jobs; worker 1, started after, has none. The disk fills while the jobs run (every
write fails, reads go on) for five leases: the outcomes wait in worker 0's settler, its leases
run out in the database meanwhile, and worker 1's rescuer fails too. The disk is freed at the
worst moment: as worker 1's rescuer writes (the interleaving a full CI run once found, where
it took the 40 finished jobs the moment writes came back and all 40 ran twice). Worker 1 must
leave them to worker 0, which records them within moments: the job table and the handlers'
side-effect log show each job run once and completed, and the log names the failure.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

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
FULL_SECONDS = 7.5  # five leases: every lease in flight runs out while the disk is full
READS = frozenset({"now", "job_get", "job_list", "job_stats", "lease_end", "wait_for_jobs"})
# the rescuer's writes: the disk is freed as worker 1 makes one
RESCUER_WRITES = frozenset({"job_rescue", "job_grace"})
DISK_FULL = "database error: OperationalError: database or disk is full"

side_effects: list[Path] = []  # the log each handler appends its job's id to (set by the test)


async def work(ctx: Any, input: Any) -> None:
    await asyncio.sleep(0.3 if ctx.job.attempt == 1 else 0.01)
    with side_effects[0].open("a") as log:
        log.write(f"{ctx.job.id}\n")


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
    """The disk both handles write to: while `full`, every write fails as SQLite's does; once
    `ending`, the next write of the freeing handle's rescuer frees it (at `freed`)."""

    full = False
    ending = False
    freed: float | None = None


class OnDisk:
    """A SqlStore whose writes fail while the disk is full (its reads still answer)."""

    def __init__(self, store: SqlStore, disk: Disk, *, frees: bool = False) -> None:
        self._store = store
        self._disk = disk
        self._frees = frees

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if name in READS or not inspect.iscoroutinefunction(value):
            return value
        disk, frees = self._disk, self._frees and name in RESCUER_WRITES

        async def write(*args: Any, **kwargs: Any) -> Any:
            if disk.full and frees and disk.ending:
                disk.full, disk.freed = False, time.monotonic()
            if disk.full:
                raise StoreError(DISK_FULL)
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


def _ran(log: Path) -> Counter[int]:
    return Counter(int(line) for line in log.read_text().split()) if log.exists() else Counter()


def test_jobs_finished_while_the_disk_was_full_run_once_when_a_peer_rescuer_writes_first(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "side-effects.log"
    side_effects[:] = [log]
    kinds: Counter[str] = Counter()

    async def main() -> float:
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
        plain = await SqlStore.open(url, migrate=True)
        disk = Disk()
        handles = [await SqlStore.open(url) for _ in range(2)]
        hooks = Hooks()
        hooks.subscribe(lambda event: kinds.update([event.kind]))
        workers = [
            await _worker(OnDisk(handles[0], disk), "w0", hooks),
            await _worker(OnDisk(handles[1], disk, frees=True), "w1", hooks),
        ]
        workers[0].start()
        try:
            jobs = await plain.job_insert([CATALOG.new_job("t.work", {}) for _ in range(JOBS)])
            ids = {job.id for job in jobs}

            async def all_executing() -> bool:
                records = await plain.job_list(JobQuery())
                return sum(r.state == "executing" and r.worker_id == "w0" for r in records) == JOBS

            await _until(all_executing, 10, "worker 0 to claim every job")
            workers[1].start()
            disk.full = True
            await asyncio.sleep(FULL_SECONDS)
            assert sum(_ran(log).values()) == JOBS  # every handler finished while it was full
            disk.ending = True

            async def freed() -> bool:
                return disk.freed is not None

            await _until(freed, 10, "worker 1's rescuer to write")

            async def all_completed() -> bool:
                records = await plain.job_list(JobQuery())
                return sum(r.state == "completed" for r in records if r.id in ids) == JOBS

            await _until(all_completed, 15, "every job to complete")
            assert disk.freed is not None
            recorded_in = time.monotonic() - disk.freed
            records = await plain.job_list(JobQuery())
            assert (
                sorted((r.state, r.attempt, r.errors) for r in records)
                == [("completed", 1, ())] * JOBS
            )
        finally:
            for worker in workers:
                await worker.stop(grace_seconds=0.5)
            for handle in [*handles, plain]:
                await handle.close()
        return recorded_in

    with caplog.at_level(logging.INFO, logger="ket"):
        recorded_in = asyncio.run(main())
    ran = _ran(log)
    twice = sorted(job for job, count in ran.items() if count > 1)
    assert twice == [], f"{len(twice)} of {JOBS} jobs ran twice: {twice}"
    assert len(ran) == JOBS
    assert kinds["rescued"] == 0 and kinds["lease_lost"] == 0, kinds
    assert kinds["completed"] == JOBS
    assert recorded_in < 2.5, recorded_in
    said = [r.getMessage() for r in caplog.records if r.name == "ket.worker"]
    assert f"recording outcomes failed: {DISK_FULL}" in said, said  # the failure, named
    assert any("the database takes writes again" in line for line in said), said  # the grace
