"""Retry or cancel one job, as `ket jobs retry ID` and the dashboard's buttons do: the store's
operator command, then the trace in the audit log; and the trace of an operator's enqueue."""

from __future__ import annotations

from dataclasses import dataclass

from ket.operate.audit import record
from ket.store.contract import JobStore
from ket.store.types import AuditAction, AuditEntry, Inserted, JobId, StateChange


@dataclass(frozen=True, kw_only=True, slots=True)
class Actor:
    """Who acts, for the audit log: the `subject` (a principal's, on the dashboard or the
    operator API, or the operator at the terminal) and the `source` it acts through
    (`dashboard`, `api`, `cli`)."""

    subject: str
    source: str


async def retry_job(store: JobStore, job_id: JobId, actor: Actor, *, tenant: str) -> StateChange:
    """Make a retryable or discarded job available now (history kept); recorded as `actor`'s."""
    change = await store.job_retry(job_id)
    await _trace(store, "retry", change, actor, tenant)
    return change


async def cancel_job(store: JobStore, job_id: JobId, actor: Actor, *, tenant: str) -> StateChange:
    """Cancel a job that has not finished (a running one is asked to abort); recorded as
    `actor`'s."""
    change = await store.job_cancel(job_id)
    await _trace(store, "cancel", change, actor, tenant)
    return change


async def enqueue_traced(
    store: JobStore, name: str, inserted: Inserted, actor: Actor, *, tenant: str
) -> None:
    """Record `actor`'s enqueue of a job `name` (made through a client, as any producer's) and
    what came of it: a new job, or the active one holding its unique key."""
    entry = AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action="enqueue",
        job_id=inserted.id,
        changed=int(not inserted.coalesced),
        skipped=int(inserted.coalesced),
        detail=f"{name}: coalesced with active job {inserted.id}"
        if inserted.coalesced
        else f"{name}: enqueued",
    )
    await record(store, entry, tenant=tenant)


def change_text(change: StateChange) -> str:
    """What the command did (`discarded -> available`), or why it did nothing."""
    return change.reason or f"{change.previous} -> {change.state}"


async def _trace(
    store: JobStore, action: AuditAction, change: StateChange, actor: Actor, tenant: str
) -> None:
    entry = AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action=action,
        job_id=change.id,
        matched=0 if change.previous is None else 1,
        changed=int(change.changed),
        skipped=0 if change.changed or change.previous is None else 1,
        detail=change_text(change),
    )
    await record(store, entry, tenant=tenant)
