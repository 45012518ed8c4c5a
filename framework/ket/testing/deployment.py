"""create_test_deployment: run a deployment's functions and jobs inside a test, no polling loop.

with create_test_deployment(erp) as e2e:          # fresh embedded store
    e2e.client.call("sales.confirm_order", {"order_id": "o1"})
    assert e2e.drain_jobs() == 1                   # runs due work until none is left
    assert e2e.transport.sent[0]["subject"] == "Order 1001"
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel

from ket.catalog import Catalog
from ket.context import AbortSignal
from ket.declare.deployment import DeploymentDecl
from ket.runtime.call import call_function
from ket.runtime.contexts import Contexts, install_models
from ket.runtime.events import Hooks
from ket.runtime.runner import JobRunner
from ket.runtime.settler import record
from ket.runtime.supervisor import Repeats
from ket.runtime.sweep import sweep
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.store.tenant import check_tenant_name
from ket.store.types import (
    ClaimedJob,
    Inserted,
    JobClaim,
    JobQuery,
    JobRecord,
    JobState,
)
from ket.testing.loop import LoopThread
from ket.transport import CaptureSender

DRAIN_LIMIT = 10_000


class WorkerDisabled(RuntimeError):
    """This test deployment was created with worker=False: it verifies queued state, it runs no
    jobs."""


class TestClient:
    """`e2e.client`: call functions as `ket serve` would."""

    def __init__(self, e2e: TestDeployment) -> None:
        self._e2e = e2e

    def call(self, name: str, input: BaseModel | Mapping[str, Any] | None = None) -> Any:
        """Call function `name` with `input`; returns its result."""
        e2e = self._e2e
        return e2e._loop.run(
            call_function(e2e.catalog, e2e._contexts, name, input, executor=e2e._executor)
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
    ) -> None:
        self.catalog = Catalog.build(deployment)
        self.tenant = check_tenant_name(tenant)  # as the client and the CLI would refuse it
        self.worker = worker
        self.clock = ManualClock()
        self.transport = CaptureSender()
        self.hooks = Hooks()
        self._folder = tempfile.TemporaryDirectory(prefix="ket-test-")
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
            storage_root=Path(self._folder.name) / "storage",
            clock=self.clock.now,
            hooks=self.hooks,
        )
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
        run_at: datetime | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
    ) -> Inserted:
        """Enqueue a job directly, as a test's producer."""
        job = self.catalog.new_job(
            name, input, run_at=run_at, priority=priority, unique_key=unique_key, company=company
        )
        [inserted] = self._loop.run(self.store.job_insert([job]))
        return inserted

    def jobs(self, state: JobState | None = None, name: str | None = None) -> list[JobRecord]:
        """Job records (id, name, state, attempt, max_attempts, errors, ...), oldest first."""
        records = self._loop.run(
            self.store.job_list(JobQuery(state=state, name=name, limit=DRAIN_LIMIT))
        )
        return sorted(records, key=lambda record: record.id)

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
                    JobClaim(queue=queue, limit=100, worker_id="test", lease_seconds=lease)
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
        """The worker's per-job step, then its recording, for one job. The attempt runs in a
        task of its own, as in the worker: what its handler changes in its task's context
        (context variables) stays in that attempt."""
        result = await asyncio.get_running_loop().create_task(self._runner.run(job, AbortSignal()))
        left = await record(self.store, [result], self._runner.report, self._repeats)
        if left:
            raise RuntimeError(f"drain_jobs could not record the outcome of job {job.id}")
        return 1 if result.kind == "completed" else 0

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
) -> TestDeployment:
    """A fresh embedded store for `deployment` (or `database_url`), a controllable clock, and
    helpers to call functions, enqueue, drain jobs and run schedules. Use it in a `with`."""
    return TestDeployment(deployment, worker=worker, database_url=database_url, tenant=tenant)
