"""Building the `ctx` of a job or a function, the same way for the worker, `ket call` and tests.

The parts that depend only on the operation (storage and transport) are built once per operation
and reused; its database view, transactor and jobs part (which depend on the company too) are
made for each use. A job's context is made for every attempt, so it makes its members
(the job, the log, the parts fenced by the attempt's signal) only when the handler first reads
them: an attempt that reads none costs one small object.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from datetime import UTC, datetime

from ket.catalog import Catalog, JobSpec, OperationSpec
from ket.context import (
    AbortSignal,
    ContextLog,
    FunctionContext,
    JobContext,
    JobInfo,
    Jobs,
    ScheduleInfo,
    Storage,
    Transactor,
    Transport,
)
from ket.context.context import job_context_made_on_use
from ket.context.db import Database, records_of
from ket.context.fence import fence
from ket.context.step import Steps
from ket.context.storage import max_blob_bytes_from
from ket.context.tx import Committed
from ket.errors import StoreError
from ket.runtime.events import Hooks, report_enqueued
from ket.runtime.progress import ProgressBoard
from ket.storage import BlobStore, LocalBlobs, blobs_from_environ
from ket.store.contract import (
    JobStore,
    QueryableStore,
    RecordStore,
    SentLedger,
    StepStore,
)
from ket.store.types import ClaimedJob, Inserted, NewJob
from ket.transport import DEFAULT_TRANSPORT_URL, Sender, sender_from_url
from ket.transport.message import MessageLimits

Clock = Callable[[], datetime]


async def install_models(store: JobStore, catalog: Catalog) -> None:
    """Let this store handle serve the deployment's models (`ctx.db`); runs DDL only if missing.

    Every handle that runs handlers must do this once after opening: a RecordStore serves only
    the models it installed.
    """
    if isinstance(store, RecordStore) and catalog.models:
        await store.record_install(list(catalog.models.values()))


def wall_clock() -> datetime:
    return datetime.now(UTC)


def default_blobs() -> BlobStore:
    """The blob backend KET_STORAGE_URL names (files under the project's .ket/storage by
    default); StorageError, naming the URL, when it is malformed or its backend missing."""
    return blobs_from_environ(os.environ)


def default_sender() -> Sender:
    """The sender KET_TRANSPORT_URL names (`dev:` by default: `.eml` files under .ket/outbox)."""
    return sender_from_url(os.environ.get("KET_TRANSPORT_URL") or DEFAULT_TRANSPORT_URL)


class Contexts:
    """Makes contexts for one tenant's store."""

    def __init__(
        self,
        *,
        store: JobStore,
        catalog: Catalog,
        tenant: str,
        sender: Sender,
        blobs: BlobStore | None = None,  # None: what KET_STORAGE_URL names
        storage_root: str | os.PathLike[str] | None = None,  # instead of blobs: files there
        clock: Clock = wall_clock,
        tx_executor: Executor | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        if not isinstance(store, SentLedger):
            raise StoreError(f"store {type(store).__name__} keeps no sent ledger for ctx.transport")
        self._store = store
        self._ledger: SentLedger = store
        # the fire ledger `ctx.schedule.fires()` reads, where the store keeps one
        self._fires = store.schedule_fires if isinstance(store, QueryableStore) else None
        self._catalog = catalog
        self._tenant = tenant
        self._sender = sender
        if blobs is not None and storage_root is not None:
            raise TypeError("give blobs or storage_root, not both")
        if blobs is None:
            blobs = LocalBlobs(storage_root) if storage_root is not None else default_blobs()
        self._blobs = blobs
        self._clock = clock
        # caps from the environment, read once here so that a bad value stops the start
        self._message_limits = MessageLimits.from_environ(os.environ)
        self._max_blob_bytes = max_blob_bytes_from(os.environ)
        self._tx_executor = tx_executor
        self._hooks = hooks
        self._parts: dict[str, tuple[Storage, Transport]] = {}
        # what ctx.progress reports wait in until a heartbeat (or the test helpers) writes them
        self.progress = ProgressBoard(hooks, tenant=tenant)
        # what reports committed jobs as `enqueued` events (None: no hooks to report to), and
        # the store's insert that does: made once, not for each ctx.jobs or ctx.tx
        self._committed: Committed | None = (
            None if hooks is None else functools.partial(report_enqueued, hooks, tenant)
        )
        self._insert = self._inserting()

    @property
    def clock(self) -> Clock:
        """The clock `ctx.now()` reads (the test helpers' controllable one, else the wall's)."""
        return self._clock

    def for_job(self, job: ClaimedJob, spec: JobSpec, signal: AbortSignal) -> JobContext:
        """The context of one attempt of `job`: every effect call raises Aborted once `signal`
        is aborted, so an attempt that is over can change nothing. Its parts are made when the
        handler first uses them (most use few), from parts built once per operation."""
        tick = job.tick
        schedule = None
        if tick is not None:
            fires = self._fires
            ledger = None if fires is None else functools.partial(fires, job.name)
            schedule = ScheduleInfo(tick=tick, skipped=job.ticks_skipped or 0, ledger=ledger)
        return job_context_made_on_use(
            functools.partial(self._job_part, job, spec, signal),
            tenant=self._tenant,
            company=job.company,
            clock=self._clock,
            signal=signal,
            schedule=schedule,
        )

    def _job_part(self, job: ClaimedJob, spec: JobSpec, signal: AbortSignal, name: str) -> object:
        """The member `name` of the context of an attempt of `job` (see for_job)."""
        if name == "job":
            return JobInfo(
                id=job.id,
                name=job.name,
                key=job.unique_key,
                queue=job.queue,
                attempt=job.attempt,
                max_attempts=job.max_attempts,
                tenant=self._tenant,
                company=job.company,
            )
        if name == "log":
            return ContextLog({"tenant": self._tenant, "job_id": job.id, "job": job.name})
        if name == "db":
            return fence(self._db(spec, job.company), signal)
        if name == "tx":
            return self._transactor(spec, job.company).fenced(signal)
        if name == "jobs":
            return fence(self._jobs(spec, job.company), signal)
        if name == "progress":
            return functools.partial(self.progress.report, job)
        if name == "step":
            store = self._store if isinstance(self._store, StepStore) else None
            return Steps(store, job, signal).run
        return fence(self._operation(spec)[_OPERATION_PARTS[name]], signal)

    def for_function(self, spec: OperationSpec, company: str | None = None) -> FunctionContext:
        """The context of one call of a function."""
        storage, transport = self._operation(spec)
        return FunctionContext(
            tenant=self._tenant,
            company=company,
            db=self._db(spec, company),
            tx=self._transactor(spec, company).run,
            jobs=self._jobs(spec, company),
            storage=storage,
            transport=transport,
            log=ContextLog({"tenant": self._tenant, "function": spec.name}),
            clock=self._clock,
        )

    def _db(self, spec: OperationSpec, company: str | None) -> Database:
        """`ctx.db` of one operation for one company. It and the transactor and `ctx.jobs` are
        made for each use (a few small objects, microseconds), not kept: a worker serving a
        thousand tenants kept them per tenant, operation and company, 3.5 MB after one job of
        each of three operations."""
        return Database(records_of(self._store), spec, self._catalog.models, company)

    def _transactor(self, spec: OperationSpec, company: str | None) -> Transactor:
        return Transactor(
            self._store,
            self._catalog,
            spec,
            self._tx_executor,
            company,
            committed=self._committed,
        )

    def _jobs(self, spec: OperationSpec, company: str | None) -> Jobs:
        return Jobs(self._catalog, spec, self._insert, company)

    def _operation(self, spec: OperationSpec) -> tuple[Storage, Transport]:
        """The parts that depend on the operation only (the db view and the jobs part depend on
        the company)."""
        parts = self._parts.get(spec.name)
        if parts is None:
            parts = self._parts[spec.name] = (
                Storage(spec, self._tenant, blobs=self._blobs, max_blob_bytes=self._max_blob_bytes),
                Transport(
                    self._sender, self._ledger, spec, self._tenant, limits=self._message_limits
                ),
            )
        return parts

    def inserter(self) -> Callable[[Sequence[NewJob]], Awaitable[list[Inserted]]]:
        """The store's insert, reporting `enqueued` events when anyone listens."""
        return self._insert

    def _inserting(self) -> Callable[[Sequence[NewJob]], Awaitable[list[Inserted]]]:
        insert, report = self._store.job_insert, self._committed
        if report is None:
            return insert

        async def insert_and_report(jobs: Sequence[NewJob]) -> list[Inserted]:
            inserted = await insert(jobs)  # committed on its own: the jobs exist now
            report(jobs, inserted)
            return inserted

        return insert_and_report


_OPERATION_PARTS = {"storage": 0, "transport": 1}  # as Contexts._operation has them
