"""Retry and cancel, one job or by filter, as the CLI and the dashboard do them: the store's
change, then one audit entry with who did it and what came of it, and a log line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from ket.errors import StoreError
from ket.operate import Actor, apply_bulk, cancel_job, count_bulk, retry_job, selection_of
from ket.store import (
    AuditEntry,
    AuditQuery,
    BulkApplied,
    BulkBatch,
    JobClaim,
    NewJob,
    Settle,
)
from ket.store.memory import MemoryStore

T = TypeVar("T")
ADA = Actor(subject="ada", source="dashboard")


def run(body: Callable[[MemoryStore], Awaitable[T]]) -> T:
    async def main() -> T:
        store = MemoryStore()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


async def discarded(store: MemoryStore, count: int = 1, queue: str = "mail") -> list[int]:
    inserted = await store.job_insert(
        [NewJob(name="shop.mail", queue=queue, max_attempts=1) for _ in range(count)]
    )
    claimed = await store.job_claim(
        JobClaim(queue=queue, limit=count, worker_id="w", lease_seconds=30)
    )
    await store.job_settle(
        [Settle(id=job.id, fence=job.fence, outcome="discarded") for job in claimed]
    )
    return [row.id for row in inserted]


async def entries(store: MemoryStore) -> list[AuditEntry]:
    return [record.entry for record in await store.audit_list(AuditQuery())]


def test_retry_of_one_job_is_audited_with_who_and_what_changed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(store: MemoryStore) -> list[AuditEntry]:
        [job_id] = await discarded(store)
        change = await retry_job(store, job_id, ADA, tenant="acme")
        assert (change.previous, change.state) == ("discarded", "available")
        return await entries(store)

    with caplog.at_level(logging.INFO, logger="ket.audit"):
        assert run(body) == [
            AuditEntry(
                subject="ada",
                source="dashboard",
                action="retry",
                job_id=1,
                matched=1,
                changed=1,
                detail="discarded -> available",
            )
        ]
    assert caplog.messages == [
        "'ada' (dashboard) retry job 1 in tenant acme: discarded -> available"
    ]


def test_a_refused_cancel_and_an_unknown_job_are_audited_as_attempts() -> None:
    async def body(store: MemoryStore) -> list[AuditEntry]:
        [job_id] = await discarded(store)
        assert not (await cancel_job(store, job_id, ADA, tenant="acme")).changed
        assert not (await cancel_job(store, 99, ADA, tenant="acme")).changed
        return await entries(store)

    refused_unknown = run(body)
    assert [(e.job_id, e.matched, e.changed, e.skipped) for e in refused_unknown] == [
        (99, 0, 0, 0),
        (1, 1, 0, 1),
    ]
    assert all(e.detail for e in refused_unknown)


def test_a_bulk_retry_works_on_the_jobs_counted_and_is_audited_once() -> None:
    async def body(store: MemoryStore) -> tuple[int, list[AuditEntry], int]:
        await discarded(store, 3)
        job_filter = await selection_of(store, "retry", states=["discarded"], queues=["mail"])
        counted = await count_bulk(store, job_filter)
        late = await discarded(store, 1)  # after the question: never touched
        outcome = await apply_bulk(store, job_filter, counted, ADA, tenant="acme")
        record = await store.job_get(late[0])
        assert record is not None and record.state == "discarded"
        return outcome.changed, await entries(store), counted.count

    changed, audited, counted = run(body)
    assert (changed, counted) == (3, 3)
    assert audited == [
        AuditEntry(
            subject="ada",
            source="dashboard",
            action="retry",
            selection={"states": ["discarded"], "queues": ["mail"], "through_id": 3},
            matched=3,
            changed=3,
        )
    ]


class FailingBulk(MemoryStore):
    """A store whose second bulk batch fails, as a database can."""

    batches = 0

    async def job_bulk_apply(self, batch: BulkBatch) -> BulkApplied:
        self.batches += 1
        if self.batches == 2:
            raise StoreError("the database went away")
        return await super().job_bulk_apply(BulkBatch(filter=batch.filter, limit=1))


def test_a_bulk_action_stopped_by_an_error_is_audited_with_how_far_it_got() -> None:
    async def main() -> list[AuditEntry]:
        store = FailingBulk()
        await discarded(store, 2)
        job_filter = await selection_of(store, "retry")
        counted = await count_bulk(store, job_filter)
        with pytest.raises(StoreError):
            await apply_bulk(store, job_filter, counted, ADA, tenant="acme")
        return await entries(store)

    [entry] = asyncio.run(main())
    assert (entry.matched, entry.changed) == (2, 1)
    assert entry.detail == "stopped by an error after 1 changes: the database went away"


class NoAudit(MemoryStore):
    async def audit_append(self, entry: AuditEntry) -> Any:
        raise StoreError("no such table: ket_audit")


def test_an_audit_row_that_cannot_be_written_is_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        store = NoAudit()
        [job_id] = await discarded(store)
        change = await retry_job(store, job_id, ADA, tenant="acme")
        assert change.changed  # the action stands; the log has it

    with caplog.at_level(logging.INFO, logger="ket.audit"):
        asyncio.run(main())
    assert caplog.records[-1].levelname == "ERROR"
    assert "not in the audit log (no such table: ket_audit)" in caplog.messages[-1]
    assert "'ada' (dashboard) retry job 1" in caplog.messages[-1]
