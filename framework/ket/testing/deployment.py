"""create_test_deployment: run a deployment's functions and jobs inside a test, no polling loop.

with create_test_deployment(erp) as e2e:          # fresh embedded store
    e2e.client.call("sales.confirm_order", {"order_id": "o1"})
    assert e2e.drain_jobs() == 1                   # runs due work until none is left
    assert e2e.transport.sent[0]["subject"] == "Order 1001"
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from ket.catalog import Catalog, EnqueueOptions
from ket.context import AbortSignal
from ket.declare.deployment import DeploymentDecl
from ket.due import RunAt, RunIn
from ket.runtime.call import call_function
from ket.runtime.contexts import Contexts, install_models
from ket.runtime.events import Hooks
from ket.runtime.runner import JobRunner, Result
from ket.runtime.settler import record
from ket.runtime.supervisor import Repeats
from ket.runtime.sweep import sweep
from ket.storage import STORAGE_URL_VARIABLE, BlobStore, LocalBlobs, blobs_from_url
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.store.tenant import check_tenant_name
from ket.store.types import (
    ClaimedJob,
    Heartbeat,
    Inserted,
    JobClaim,
    JobId,
    JobQuery,
    JobRecord,
    JobState,
    Lease,
    NewJob,
)
from ket.store.validate import encode_payload
from ket.testing.assertion import ENQUEUED_STATES, Expected, found_text
from ket.testing.loop import LoopThread
from ket.transport import CaptureSender

DRAIN_LIMIT = 10_000


class WorkerDisabled(RuntimeError):
    """This test deployment was created with worker=False: it verifies queued state, it runs no
    jobs."""


@dataclass(frozen=True, kw_only=True)
class Performed:
    """How one attempt run by `perform_job` ended: `outcome` is completed, failed (it would be
    retried after `delay_seconds`), discarded, cancelled or snoozed (after `delay_seconds`);
    `error` is the text the worker would store; `result`, what a completed job that declares
    an output would keep (its secret fields sealed or marked, as stored); `progress`, what the
    handler last reported with ctx.progress."""

    outcome: str
    error: str | None = None
    delay_seconds: float | None = None
    result: dict[str, Any] | None = None
    progress: dict[str, Any] | None = None


class TestClient:
    """`e2e.client`: call functions as `ket serve` would."""

    def __init__(self, e2e: TestDeployment) -> None:
        self._e2e = e2e

    def call(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        company: str | None = None,
    ) -> Any:
        """Call function `name` with `input`, for `company` (as `ket serve` does for its
        principal's company); returns its result."""
        e2e = self._e2e
        return e2e._loop.run(
            call_function(
                e2e.catalog, e2e._contexts, name, input, executor=e2e._executor, company=company
            )
        )


class TestDatabase:
    """`e2e.db`: unrestricted access to model rows, for arranging and asserting."""

    def __init__(self, e2e: TestDeployment) -> None:
        self._e2e = e2e

    def insert(self, model: str, values: Mapping[str, Any]) -> str:
        return self._e2e._loop.run(self._e2e.store.record_insert(model, values))

    def get(self, model: str, id: str) -> dict[str, Any] | None:
        return self._e2e._loop.run(self._e2e.store.record_get(model, id))

    def select(
        self, model: str, where: Mapping[str, Any] | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        return self._e2e._loop.run(self._e2e.store.record_select(model, where, limit))

    def update(self, model: str, where: Mapping[str, Any], values: Mapping[str, Any]) -> int:
        return self._e2e._loop.run(self._e2e.store.record_update(model, where, values))

    def delete(self, model: str, where: Mapping[str, Any]) -> int:
        return self._e2e._loop.run(self._e2e.store.record_delete(model, where))


class TestDeployment:
    """The handle `create_test_deployment` returns; see the module docstring."""

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        deployment: DeploymentDecl,
        *,
        worker: bool = True,
        database_url: str | None = None,
        tenant: str = "default",
        storage_url: str | None = None,
    ) -> None:
        self.catalog = Catalog.build(deployment)
        self.tenant = check_tenant_name(tenant)  # as the client and the CLI would refuse it
        self.worker = worker
        self.clock = ManualClock()
        self.transport = CaptureSender()
        self.hooks = Hooks()
        self._folder = tempfile.TemporaryDirectory(prefix="ket-test-")
        try:
            blobs = _blobs(storage_url, Path(self._folder.name) / "storage")
        except BaseException:
            self._folder.cleanup()
            raise
        url = database_url or f"sqlite:///{Path(self._folder.name) / 'ket.db'}"
        self._loop = LoopThread()
        self._executor = ThreadPoolExecutor(max_workers=8, thread_name_prefix="ket-test-job")
        try:
            self.store: SqlStore = self._loop.run(self._open(url))
        except BaseException:
            self._shutdown()
            raise
        self._contexts = Contexts(
            store=self.store,
            catalog=self.catalog,
            tenant=tenant,
            sender=self.transport,
            blobs=blobs,
            clock=self.clock.now,
            hooks=self.hooks,
        )
        self._contexts.progress.attach(self._loop.loop)  # where attempts run
        self._runner = JobRunner(
            catalog=self.catalog,
            contexts=self._contexts,
            executor=self._executor,
            hooks=self.hooks,
            tenant=tenant,
        )
        self._repeats = Repeats()
        self.client = TestClient(self)
        self.db = TestDatabase(self)

    async def _open(self, url: str) -> SqlStore:
        store = await SqlStore.open(url, clock=self.clock, migrate=True)
        await install_models(store, self.catalog)
        return store

    # -- producing and inspecting ---------------------------------------------------------

    def enqueue(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        run_at: RunAt | None = None,
        run_in: RunIn | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        expires_in: RunIn | None = None,
    ) -> Inserted:
        """Enqueue a job directly, as a test's producer; `run_in` counts from `clock.now()`."""
        job = self.catalog.new_job(
            name,
            input,
            EnqueueOptions.given(
                run_at=run_at,
                run_in=run_in,
                priority=priority,
                unique_key=unique_key,
                company=company,
                tags=tags,
                expires_in=expires_in,
            ),
        )
        [inserted] = self._loop.run(self._insert([job]))
        return inserted

    async def _insert(self, jobs: list[NewJob]) -> list[Inserted]:
        """Insert as `ctx.jobs` does, reporting `enqueued` events to `hooks`."""
        return await self._contexts.inserter()(jobs)

    def assert_enqueued(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        unique_key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        company: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> JobRecord:
        """The oldest enqueued (available or scheduled) job `name` with every field given:
        `input` keys equal to the payload's (others ignored), and the options exactly. Raises
        AssertionError listing the enqueued jobs of that name when there is none."""
        expected = Expected.of(
            name,
            input,
            queue=queue,
            unique_key=unique_key,
            run_at=run_at,
            priority=priority,
            company=company,
            tags=tags,
        )
        enqueued, found = self._enqueued(expected)
        if found:
            return found[0]
        raise AssertionError(
            f"expected a job {expected.describe()} to be enqueued; the enqueued jobs of "
            f"{name}:\n{found_text(enqueued)}"
        )

    def refute_enqueued(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        queue: str | None = None,
        unique_key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        company: str | None = None,
        tags: Sequence[str] | None = None,
    ) -> None:
        """Raises AssertionError, naming them, when enqueued jobs `name` have every field given
        (see `assert_enqueued`)."""
        expected = Expected.of(
            name,
            input,
            queue=queue,
            unique_key=unique_key,
            run_at=run_at,
            priority=priority,
            company=company,
            tags=tags,
        )
        _, found = self._enqueued(expected)
        if found:
            raise AssertionError(
                f"expected no job {expected.describe()} to be enqueued; found:\n{found_text(found)}"
            )

    def _enqueued(self, expected: Expected) -> tuple[list[JobRecord], list[JobRecord]]:
        """The enqueued jobs of `expected`'s name, oldest first, and those it matches."""
        self.catalog.job(expected.name)  # an unknown name is a test's typo: JobRejected says so
        enqueued = [r for r in self.jobs(name=expected.name) if r.state in ENQUEUED_STATES]
        return enqueued, [r for r in enqueued if expected.matches(r, self.catalog.keys)]

    def jobs(self, state: JobState | None = None, name: str | None = None) -> list[JobRecord]:
        """Job records (id, name, state, attempt, max_attempts, errors, ...), oldest first."""
        query = JobQuery(
            states=() if state is None else (state,),
            names=() if name is None else (name,),
            limit=DRAIN_LIMIT,
        )
        records = self._loop.run(self.store.job_list(query))
        return sorted(records, key=lambda record: record.id)

    def job(self, job_id: JobId) -> JobRecord:
        """One job in full, its result included (KeyError when there is none)."""
        record = self._loop.run(self.store.job_get(job_id))
        if record is None:
            raise KeyError(f"no job {job_id}")
        return record

    # -- running --------------------------------------------------------------------------

    def drain_jobs(self) -> int:
        """Run due jobs (and the jobs they enqueue) until none is due; returns how many
        completed. Work scheduled later waits for `clock.advance(...)`."""
        self._require_worker()
        return self._loop.run(self._drain())

    async def _drain(self) -> int:
        completed = runs = 0
        lease = self.catalog.worker.lease_ms / 1000
        while True:
            claimed = []
            for queue in self.catalog.worker.queues:
                claimed += await self.store.job_claim(
                    JobClaim(
                        queue=queue,
                        limit=100,
                        worker_id="test",
                        lease_seconds=lease,
                        limits=self.catalog.claim_limits.get(queue),
                    )
                )
            if not claimed:
                return completed
            for job in sorted(claimed, key=lambda j: (j.priority, j.run_at, j.id)):
                runs += 1
                if runs > DRAIN_LIMIT:
                    raise RuntimeError(
                        f"drain_jobs ran {DRAIN_LIMIT} jobs and work is still due: "
                        "do jobs keep enqueueing each other?"
                    )
                completed += await self._run(job)

    async def _run(self, job: ClaimedJob) -> int:
        """The worker's per-job step, then its recording, for one job."""
        result = await self._attempt(job)
        reported = self._contexts.progress.take(job.id)
        if reported is not None:  # what the worker's next heartbeat would have written
            lease = Lease(id=job.id, fence=job.fence, progress=reported)
            seconds = self.catalog.worker.lease_ms / 1000
            await self.store.job_heartbeat(Heartbeat(leases=[lease], lease_seconds=seconds))
        left = await record(self.store, [result], self._runner.report, self._repeats)
        if left:
            raise RuntimeError(f"drain_jobs could not record the outcome of job {job.id}")
        return 1 if result.kind == "completed" else 0

    def perform_job(
        self,
        name: str,
        input: BaseModel | Mapping[str, Any] | None = None,
        *,
        attempt: int = 1,
        company: str | None = None,
    ) -> Performed:
        """Run one attempt of job `name` with `input` now, as the worker would (input validated,
        a real context with its effects enforced, the timeout, the outcome decided and
        reported to `hooks`), without the queue: no job row is written or settled; what the
        handler writes and enqueues is. `attempt` says which attempt of `max_attempts` it is."""
        self._require_worker()
        job = self.catalog.new_job(name, input, EnqueueOptions.given(company=company))
        now = self.clock.now()
        claimed = ClaimedJob(
            id=0,
            name=job.name,
            queue=job.queue,
            payload=json.loads(encode_payload(job)),  # as the worker reads it back
            payload_version=job.payload_version,
            priority=job.priority,
            attempt=attempt,
            max_attempts=job.max_attempts,
            unique_key=None,
            company=job.company,
            run_at=now,
            enqueued_at=now,
            lease_until=now + timedelta(milliseconds=self.catalog.worker.lease_ms),
            fence=0,
            tick=None,
            ticks_skipped=None,
        )
        result = self._loop.run(self._attempt(claimed))
        self._runner.report(result, applied=True)
        reported = self._contexts.progress.take(claimed.id)
        settle = result.settle
        return Performed(
            outcome=result.kind,
            error=result.error,
            delay_seconds=settle.delay_seconds if settle and result.kind != "completed" else None,
            result=json.loads(settle.result) if settle and settle.result else None,
            progress=None if reported is None else json.loads(reported),
        )

    async def _attempt(self, job: ClaimedJob) -> Result:
        """The attempt in a task of its own, as in the worker: what its handler changes in its
        task's context (context variables) stays in that attempt."""
        return await asyncio.get_running_loop().create_task(self._runner.run(job, AbortSignal()))

    def run_schedules(self) -> int:
        """One schedule sweep at the clock's now; returns how many ticks fired."""
        self._require_worker()
        return self._loop.run(sweep(self.store, self.catalog, tenant=self.tenant, hooks=self.hooks))

    def _require_worker(self) -> None:
        if not self.worker:
            raise WorkerDisabled()

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Tear the store down."""
        try:
            self._loop.run(self.store.close())
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._loop.close()
        self._folder.cleanup()

    def __enter__(self) -> TestDeployment:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def create_test_deployment(
    deployment: DeploymentDecl,
    *,
    worker: bool = True,
    database_url: str | None = None,
    tenant: str = "default",
    storage_url: str | None = None,
) -> TestDeployment:
    """A fresh embedded store for `deployment` (or `database_url`), a controllable clock, and
    helpers to call functions, enqueue, drain jobs and run schedules. Use it in a `with`.

    `ctx.storage` keeps blobs where `storage_url` says, else where KET_STORAGE_URL says, else
    in a fresh folder removed on close."""
    return TestDeployment(
        deployment,
        worker=worker,
        database_url=database_url,
        tenant=tenant,
        storage_url=storage_url,
    )


def _blobs(storage_url: str | None, fresh: Path) -> BlobStore:
    """The backend `storage_url` names, else KET_STORAGE_URL's, else files under `fresh`."""
    url = storage_url if storage_url is not None else os.environ.get(STORAGE_URL_VARIABLE)
    return blobs_from_url(url) if url else LocalBlobs(fresh)
