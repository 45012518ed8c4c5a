"""The worker's per-job step with a sender and a storage root of the test's choosing.

`create_test_deployment` always sends through a capturing sender; the transport and storage
attacks need a real SMTP sender and a storage folder the test can plant links in. This runs
jobs the way `drain_jobs` and the worker do (claim, JobRunner.run, settler.record) on a real
SQLite or PostgreSQL store.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ket.catalog import Catalog
from ket.context import AbortSignal
from ket.declare.deployment import DeploymentDecl
from ket.runtime.contexts import Contexts, install_models
from ket.runtime.events import Hooks
from ket.runtime.runner import JobRunner
from ket.runtime.settler import record
from ket.runtime.supervisor import Repeats
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.store.types import JobClaim, JobQuery, JobRecord
from ket.transport import Sender

START = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


class WorkerStep:
    """One tenant's store, contexts and runner; `drain()` runs every due job once."""

    def __init__(
        self,
        deployment: DeploymentDecl,
        *,
        database_url: str,
        sender: Sender,
        storage_root: Path,
        tenant: str = "acme",
    ) -> None:
        self.catalog = Catalog.build(deployment)
        self.url = database_url
        self.sender = sender
        self.storage_root = storage_root
        self.tenant = tenant
        self.clock = ManualClock(START)

    async def __aenter__(self) -> WorkerStep:
        self.store = await SqlStore.open(self.url, clock=self.clock, migrate=True)
        await install_models(self.store, self.catalog)
        self.executor = ThreadPoolExecutor(2, thread_name_prefix="ket-hostile")
        contexts = Contexts(
            store=self.store,
            catalog=self.catalog,
            tenant=self.tenant,
            sender=self.sender,
            storage_root=self.storage_root,
            clock=self.clock.now,
        )
        self.runner = JobRunner(
            catalog=self.catalog,
            contexts=contexts,
            executor=self.executor,
            hooks=Hooks(),
            tenant=self.tenant,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()
        self.executor.shutdown(wait=True)

    async def enqueue(self, name: str, input: dict[str, Any]) -> int:
        [inserted] = await self.store.job_insert([self.catalog.new_job(name, input)])
        return int(inserted.id)

    async def drain(self) -> list[str]:
        """Run every due job once; the kinds of their outcomes (completed, failed, ...)."""
        claimed = await self.store.job_claim(
            JobClaim(queue="default", limit=100, worker_id="hostile", lease_seconds=60)
        )
        kinds = []
        for job in claimed:
            result = await self.runner.run(job, AbortSignal())
            left = await record(self.store, [result], lambda *_: None, Repeats())
            assert left == []
            kinds.append(result.kind)
        return kinds

    async def job(self, job_id: int) -> JobRecord:
        [found] = [j for j in await self.store.job_list(JobQuery(limit=100)) if j.id == job_id]
        return found


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)
