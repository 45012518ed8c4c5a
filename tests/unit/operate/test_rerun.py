"""Rerunning a finished job, as `ket jobs rerun` does: a new job with the finished one's name,
stored input, queue, priority, tags, company and unique key, a fresh attempt count and the
declaration's attempts, linked to it; one audit entry either way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from cryptography.fernet import Fernet

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog, EnqueueOptions
from ket.operate import Actor, enqueue_traced, rerun_job
from ket.store import AuditEntry, AuditQuery, Inserted, JobClaim, JobQuery, NewJob, Settle
from ket.store.memory import MemoryStore

T = TypeVar("T")
ADA = Actor(subject="ada@host", source="cli")


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


MODULE = define_module(
    name="shop",
    jobs={
        "charge": define_job(
            idempotent=True,
            queue="mail",
            max_attempts=7,
            input={"card": "secret", "amount": "int"},
            handler=handler,
        )
    },
)
CATALOG = Catalog.build(
    define_deployment(name="shop", modules=[MODULE], worker={"queues": {"mail": 1}}),
    environ={"KET_SECRET_KEYS": Fernet.generate_key().decode()},
)


def run(body: Callable[[MemoryStore], Awaitable[T]]) -> T:
    async def main() -> T:
        store = MemoryStore()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())


async def finished(store: MemoryStore, outcome: str = "completed", **options: Any) -> int:
    job = CATALOG.new_job("shop.charge", {"card": "4242", "amount": 5}, EnqueueOptions(**options))
    [inserted] = await store.job_insert([job])
    [claimed] = await store.job_claim(
        JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
    )
    await store.job_settle([Settle(id=claimed.id, fence=claimed.fence, outcome=outcome)])  # type: ignore[arg-type]
    return inserted.id


async def entries(store: MemoryStore) -> list[AuditEntry]:
    return [record.entry for record in await store.audit_list(AuditQuery())]


def test_a_rerun_copies_the_finished_job_keeps_its_sealed_input_and_is_linked() -> None:
    async def scenario(store: MemoryStore) -> None:
        origin = await finished(
            store, "discarded", priority=-3, tags=["vip"], company="c1", unique_key="charge:1"
        )
        reran = await rerun_job(store, CATALOG, origin, ADA, tenant="default")
        assert reran.inserted is not None and reran.state == "discarded"
        old, new = await store.job_get(origin), await store.job_get(reran.inserted.id)
        assert old is not None and new is not None
        assert new.payload == old.payload and "$sealed" in str(new.payload)
        same = ("name", "queue", "priority", "tags", "company", "unique_key", "payload_version")
        assert [getattr(new, f) for f in same] == [getattr(old, f) for f in same]
        assert (new.state, new.attempt, new.max_attempts, new.errors) == ("available", 0, 7, ())
        assert (new.rerun_of, await store.job_reruns(origin)) == (origin, [new.id])
        assert await entries(store) == [
            AuditEntry(
                subject="ada@host",
                source="cli",
                action="rerun",
                job_id=origin,
                matched=1,
                changed=1,
                detail=f"rerun as job {new.id}",
            )
        ]

    run(scenario)


def test_a_job_that_has_not_finished_or_is_not_declared_is_not_rerun() -> None:
    async def scenario(store: MemoryStore) -> None:
        [waiting] = await store.job_insert(
            [CATALOG.new_job("shop.charge", {"card": "1", "amount": 1})]
        )
        refused = await rerun_job(store, CATALOG, waiting.id, ADA, tenant="default")
        assert (refused.state, refused.inserted) == ("available", None)
        assert refused.reason.startswith("it is available: only a finished job")
        [gone] = await store.job_insert([NewJob(name="shop.gone", queue="old")])
        await store.job_cancel(gone.id)
        undeclared = await rerun_job(store, CATALOG, gone.id, ADA, tenant="default")
        assert (undeclared.state, undeclared.inserted) == ("cancelled", None)
        assert "'shop.gone' is not a job of deployment 'shop'" in undeclared.reason
        missing = await rerun_job(store, CATALOG, 999, ADA, tenant="default")
        assert (missing.state, missing.reason) == (None, "no such job")
        assert [(e.job_id, e.changed, e.skipped) for e in await entries(store)] == [
            (999, 0, 0),
            (gone.id, 0, 1),
            (waiting.id, 0, 1),
        ]
        assert len(await store.job_list(JobQuery())) == 2

    run(scenario)


def test_an_operators_enqueue_is_audited_new_or_coalesced() -> None:
    async def scenario(store: MemoryStore) -> None:
        await enqueue_traced(
            store, "shop.charge", Inserted(id=4, coalesced=False), ADA, tenant="default"
        )
        await enqueue_traced(
            store, "shop.charge", Inserted(id=4, coalesced=True), ADA, tenant="default"
        )
        assert [
            (e.action, e.job_id, e.changed, e.skipped, e.detail) for e in await entries(store)
        ] == [
            ("enqueue", 4, 0, 1, "shop.charge: coalesced with active job 4"),
            ("enqueue", 4, 1, 0, "shop.charge: enqueued"),
        ]

    run(scenario)
