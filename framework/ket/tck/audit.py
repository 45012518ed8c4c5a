"""The audit log (capability AuditLog): who retried or cancelled what, kept as it was written.

Entries are appended at the store's time and read back newest first, every field as given, on
every replica; an entry no store could keep faithfully is refused before anything is written.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ket.errors import JobRejected
from ket.store.contract import AuditLog
from ket.store.types import AuditEntry, AuditQuery
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_audit_append_records_the_entry_at_the_store_time",
    "test_audit_entries_keep_every_field_as_given",
    "test_audit_list_is_newest_first_and_pages",
    "test_audit_log_is_shared_by_every_replica",
    "test_audit_refuses_an_entry_no_store_could_keep",
]


def _audit(t: Tck) -> AuditLog:
    return t.require(AuditLog)  # type: ignore[type-abstract]


def _entry(**fields: object) -> AuditEntry:
    values: dict[str, object] = {
        "subject": "ada",
        "source": "dashboard",
        "action": "retry",
        "job_id": 7,
        "matched": 1,
        "changed": 1,
        "detail": "discarded -> available",
    }
    values.update(fields)
    return AuditEntry(**values)  # type: ignore[arg-type]


@tck_test
async def test_audit_append_records_the_entry_at_the_store_time(t: Tck) -> None:
    log = _audit(t)
    t.clock.advance(seconds=90)
    record = await log.audit_append(_entry())
    assert record.at == t.clock.now()
    assert record.entry == _entry()
    assert await log.audit_list(AuditQuery()) == [record]


@tck_test
async def test_audit_entries_keep_every_field_as_given(t: Tck) -> None:
    log = _audit(t)
    bulk = _entry(
        subject="Zoë <ops@example.com>",
        source="cli",
        action="cancel",
        job_id=None,
        selection={"states": ["available", "retryable"], "queue": "mail", "tags": ["é", "x"]},
        matched=12,
        changed=10,
        skipped=2,
        detail="",
    )
    written = await log.audit_append(bulk)
    [read] = await log.audit_list(AuditQuery())
    assert read == written
    assert read.entry == bulk


@tck_test
async def test_audit_list_is_newest_first_and_pages(t: Tck) -> None:
    log = _audit(t)
    written = []
    for number in range(5):
        written.append(await log.audit_append(_entry(job_id=number + 1)))
        t.clock.advance(seconds=1)
    assert len({record.id for record in written}) == 5
    newest_first = list(reversed(written))
    assert await log.audit_list(AuditQuery()) == newest_first
    assert await log.audit_list(AuditQuery(limit=2, offset=1)) == newest_first[1:3]
    assert await log.audit_list(AuditQuery(limit=0)) == []
    assert await log.audit_list(AuditQuery(offset=5)) == []
    assert written[-1].at - written[0].at == timedelta(seconds=4)
    # one job's entries only, newest first
    again = await log.audit_append(_entry(job_id=2))
    assert await log.audit_list(AuditQuery(job_id=2)) == [again, written[1]]
    assert await log.audit_list(AuditQuery(job_id=2, limit=1)) == [again]
    assert await log.audit_list(AuditQuery(job_id=99)) == []


@tck_test
async def test_audit_log_is_shared_by_every_replica(t: Tck) -> None:
    log = _audit(t)
    replica = await t.replica()
    assert isinstance(replica, AuditLog), "a replica lacks the capability its store has"
    first = await log.audit_append(_entry(subject="ada"))
    second = await replica.audit_append(_entry(subject="grace"))
    assert await log.audit_list(AuditQuery()) == [second, first]
    assert await replica.audit_list(AuditQuery()) == [second, first]


@tck_test
async def test_audit_refuses_an_entry_no_store_could_keep(t: Tck) -> None:
    log = _audit(t)
    for bad, words in (
        (_entry(subject=""), "audit subject"),
        (_entry(subject="a\x00b"), "audit subject"),
        (_entry(source=""), "audit source"),
        (_entry(detail="x" * 2_001), "audit detail"),
        (_entry(action="delete"), "audit action"),
        (_entry(job_id=2**63), "job id"),
        (_entry(matched=-1), "audit matched"),
        (_entry(skipped=True), "audit skipped"),
        (_entry(selection={"when": object()}), "audit selection"),
        (_entry(selection=["queue"]), "audit selection"),
    ):
        with pytest.raises(JobRejected, match=words):
            await log.audit_append(bad)
    with pytest.raises(JobRejected, match="audit list limit"):
        await log.audit_list(AuditQuery(limit=-1))
    assert await log.audit_list(AuditQuery()) == []
