"""Rerun a finished job, as `ket jobs rerun ID` does: the store's rerun, then the trace in the
audit log.

The rerun is a new job with the finished one's name, input, queue, priority, tags, company and
unique key, a fresh attempt count and the declaration's `max_attempts`, linked to the job it
reruns (its `rerun_of`). The input is the payload as stored: a sealed secret stays sealed, never
opened here, and a payload of an older input version is upgraded by the worker as any other.
"""

from __future__ import annotations

from ket import trace
from ket.catalog import Catalog
from ket.errors import StoreError
from ket.operate.action import Actor
from ket.operate.audit import record
from ket.store.contract import JobStore, QueryableStore, RerunStore
from ket.store.types import TERMINAL_STATES, AuditEntry, JobId, JobRecord, NewJob, Reran, Rerun
from ket.store.validate import not_finished


async def rerun_job(
    store: JobStore, catalog: Catalog, job_id: JobId, actor: Actor, *, tenant: str
) -> Reran:
    """Enqueue the finished job `job_id` again as a new job linked to it; refused (`reason`)
    when it has not finished, does not exist or is no job of the deployment. Recorded as
    `actor`'s."""
    if not isinstance(store, RerunStore) or not isinstance(store, QueryableStore):
        raise StoreError(f"store {type(store).__name__} cannot rerun jobs")
    found = await store.job_get(job_id)
    reran = await _rerun(store, catalog, job_id, found)
    await record(store, _entry(reran, actor), tenant=tenant)
    return reran


async def _rerun(
    store: RerunStore, catalog: Catalog, job_id: JobId, found: JobRecord | None
) -> Reran:
    if found is None:
        return Reran(origin=job_id, state=None, inserted=None, reason="no such job")
    if found.state not in TERMINAL_STATES:  # the store checks again, with the row locked
        return Reran(
            origin=job_id, state=found.state, inserted=None, reason=not_finished(found.state)
        )
    spec = catalog.jobs.get(found.name)
    if spec is None:
        reason = (
            f"{found.name!r} is not a job of deployment {catalog.deployment!r}: no worker runs it"
        )
        return Reran(origin=job_id, state=found.state, inserted=None, reason=reason)
    job = NewJob(
        name=found.name,
        queue=found.queue,
        payload=found.payload,
        payload_version=found.payload_version,
        priority=found.priority,
        max_attempts=spec.max_attempts,
        unique_key=found.unique_key,
        company=found.company,
        tags=found.tags,
        trace_context=trace.enqueue_context(found.name, found.queue) if catalog.tracing else None,
    )
    return await store.job_rerun(Rerun(origin=job_id, job=job))


def rerun_text(reran: Reran) -> str:
    """What the rerun did (`rerun as job 15`), or why it did nothing."""
    if reran.inserted is None:
        return reran.reason
    if reran.inserted.coalesced:
        return f"not rerun: active job {reran.inserted.id} holds its unique key"
    return f"rerun as job {reran.inserted.id}"


def _entry(reran: Reran, actor: Actor) -> AuditEntry:
    made = reran.inserted is not None and not reran.inserted.coalesced
    return AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action="rerun",
        job_id=reran.origin,
        matched=0 if reran.state is None else 1,
        changed=int(made),
        skipped=int(reran.state is not None and not made),
        detail=rerun_text(reran),
    )
