"""Retry or cancel every job a filter selects, as `ket jobs retry/cancel` by filter and the
dashboard's confirmation do.

Two steps, with the operator's yes between them: `count_bulk` counts the matching jobs now and
samples the first; `apply_bulk` works on the jobs counted (ids up to the highest counted, so a
job enqueued after the question is never touched), BULK_BATCH jobs per transaction, and writes
one audit entry with what came of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from ket.errors import KetError
from ket.operate.action import Actor
from ket.operate.audit import record
from ket.store.contract import BulkStore, JobStore
from ket.store.types import (
    BULK_BATCH,
    AuditEntry,
    BulkAction,
    BulkBatch,
    BulkCount,
    JobFilter,
    JobState,
    StateChange,
)

SAMPLE = 10  # jobs a count samples: shown before the question


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkOutcome:
    """What a bulk action did: the jobs changed, and those left alone with their reasons."""

    changed: int
    skipped: tuple[StateChange, ...]


async def selection_of(
    store: JobStore,
    action: BulkAction,
    *,
    states: Sequence[JobState] = (),
    queues: Sequence[str] = (),
    names: Sequence[str] = (),
    tags: Sequence[str] = (),
    older_than: float | None = None,
    ids: Sequence[int] = (),
) -> JobFilter:
    """The filter of an operator's selection (each of `states`, `queues`, `names` and `tags`
    takes the jobs with any one of its values, as a listing does); `older_than` seconds is
    measured on the store's clock."""
    before = None
    if older_than is not None:
        before = await store.now() - timedelta(seconds=older_than)
    return JobFilter(
        action=action,
        states=tuple(dict.fromkeys(states)),
        queues=tuple(dict.fromkeys(queues)),
        names=tuple(dict.fromkeys(names)),
        tags=tuple(dict.fromkeys(tags)),
        enqueued_before=before,
        ids=tuple(dict.fromkeys(ids)),
    )


async def count_bulk(store: JobStore, job_filter: JobFilter, sample: int = SAMPLE) -> BulkCount:
    """How many jobs the filter matches now, the first `sample` and the highest id."""
    return await _bulk(store).job_bulk_count(job_filter, sample)


async def apply_bulk(
    store: JobStore,
    job_filter: JobFilter,
    counted: BulkCount,
    actor: Actor,
    *,
    tenant: str,
    progress: Callable[[int], None] | None = None,
) -> BulkOutcome:
    """Apply the filter's action to the jobs `counted` found (none enqueued since), a batch per
    transaction, calling `progress(changed so far)` after each; one audit entry, written even
    when a batch fails (then with how far it got)."""
    bulk = _bulk(store)
    if counted.last_id is None:
        return BulkOutcome(changed=0, skipped=())
    current = replace(job_filter, through_id=counted.last_id)
    changed = 0
    skipped: list[StateChange] = []
    failure = ""
    try:
        while True:
            applied = await bulk.job_bulk_apply(BulkBatch(filter=current, limit=BULK_BATCH))
            if applied.last_id is None:
                break
            changed += len(applied.changed)
            skipped.extend(applied.skipped)
            current = replace(current, after_id=applied.last_id)
            if progress is not None:
                progress(changed)
    except Exception as error:
        failure = f"stopped by an error after {changed} changes: {error}"
        raise
    finally:
        entry = AuditEntry(
            subject=actor.subject,
            source=actor.source,
            action=job_filter.action,
            selection=selection_json(job_filter, through_id=counted.last_id),
            matched=counted.count,
            changed=changed,
            skipped=len(skipped),
            detail=failure,
        )
        await record(store, entry, tenant=tenant)
    return BulkOutcome(changed=changed, skipped=tuple(skipped))


def selection_json(job_filter: JobFilter, *, through_id: int | None) -> dict[str, Any]:
    """The filter as the audit log keeps it: only what was given, plus the highest id counted."""
    given: dict[str, Any] = {
        "states": list(job_filter.states),
        "queues": list(job_filter.queues),
        "jobs": list(job_filter.names),
        "tags": list(job_filter.tags),
        "enqueued_before": None
        if job_filter.enqueued_before is None
        else job_filter.enqueued_before.isoformat(),
    }
    chosen = {key: value for key, value in given.items() if value not in (None, [])}
    return {**chosen, "through_id": through_id}


def _bulk(store: JobStore) -> BulkStore:
    if not isinstance(store, BulkStore):
        raise KetError("this store cannot retry or cancel jobs by filter")
    return store
