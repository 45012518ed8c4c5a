"""The queues as an operator sees them, and which queue a pause or a resume may name: one the
deployment declares, and for a resume also one paused now (a pause the deployment outlived)."""

from __future__ import annotations

import asyncio

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import KetError
from ket.operate import Actor, pause_queue, queue_pauses, queue_rows, resumable_queue
from ket.store.memory import MemoryStore


async def _mail(ctx: object, input: object) -> None:
    """Send."""


CATALOG = Catalog.build(
    define_deployment(
        name="desk",
        modules=[
            define_module(
                name="desk",
                jobs={"mail": define_job(idempotent=True, queue="mail", handler=_mail)},
            )
        ],
        worker={"queues": {"default": 1, "mail": 2}},
    )
)
OTTO = Actor(subject="otto", source="api")


def test_a_resume_names_a_declared_queue_or_a_paused_one() -> None:
    async def main() -> None:
        store = MemoryStore()
        try:
            assert await resumable_queue(store, CATALOG, "mail") == "mail"
            with pytest.raises(KetError, match=r"no queue 'retired' in deployment 'desk'"):
                await resumable_queue(store, CATALOG, "retired")
            await store.queue_pause("retired", paused_by="ops")
            assert await resumable_queue(store, CATALOG, "retired") == "retired"
            rows = await queue_rows(store, CATALOG)
            assert [(r.queue, r.pause is not None) for r in rows] == [
                ("default", False),
                ("mail", False),
                ("retired", True),
            ]
            assert rows[2].to_json()["paused_by"] == "ops"
        finally:
            await store.close()

    asyncio.run(main())


def test_a_pause_is_who_made_it() -> None:
    async def main() -> None:
        store = MemoryStore()
        try:
            assert await pause_queue(store, "mail", OTTO, tenant="default") is True
            assert (
                await pause_queue(store, "mail", Actor(subject="x", source="cli"), tenant="default")
                is False
            )
            assert {q: p.paused_by for q, p in (await queue_pauses(store)).items()} == {
                "mail": "otto"
            }
        finally:
            await store.close()

    asyncio.run(main())
