"""The fence: once a job's signal is aborted, every effect call on its context raises Aborted,
for async handlers and, through the Blocking adapter, for plain ones."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_job, define_model, define_module
from ket.catalog import Catalog
from ket.context import AbortSignal, Blocking, JobContext, TxContext
from ket.context.fence import fence
from ket.errors import Aborted
from ket.runtime.contexts import Contexts
from ket.store.memory import MemoryStore
from ket.store.types import JobClaim, JobQuery
from ket.transport import CaptureSender


def _handler(ctx: Any, input: Any) -> None: ...


notes = define_module(
    name="notes",
    models={"Note": define_model({"text": "string"})},
    jobs={
        "write": define_job(
            idempotent=True,
            effects=[
                "write:notes.Note",
                "enqueue:notes.follow_up",
                "storage:read",
                "storage:write",
                "transport:send",
            ],
            handler=_handler,
        ),
        "follow_up": define_job(idempotent=True, handler=_handler),
    },
)
CATALOG = Catalog.build(define_deployment(name="notes", modules=[notes]))


def message(key: str) -> dict[str, Any]:
    return {
        "idempotency_key": key,
        "from": {"address": "notes@example.com"},
        "to": [{"address": "ann@example.com"}],
        "subject": "A note",
        "text": "Hello.",
    }


@dataclass
class Setup:
    store: MemoryStore
    sender: CaptureSender
    ctx: JobContext
    signal: AbortSignal
    storage: Path


def run(tmp_path: Path, scenario: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.record_install(list(CATALOG.models.values()))
        sender = CaptureSender()
        contexts = Contexts(
            store=store, catalog=CATALOG, tenant="acme", sender=sender, storage_root=tmp_path
        )
        await store.job_insert([CATALOG.new_job("notes.write")])
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="w1", lease_seconds=30)
        )
        signal = AbortSignal()
        ctx = contexts.for_job(job, CATALOG.job("notes.write"), signal)
        try:
            await scenario(Setup(store, sender, ctx, signal, tmp_path / "acme"))
        finally:
            await store.close()

    asyncio.run(main())


async def insert_in_tx(tx: TxContext) -> str:
    return await tx.db.insert("notes.Note", {"text": "in a transaction"})


def plain_insert_in_tx(tx: Any) -> str:
    return tx.db.insert("notes.Note", {"text": "in a transaction"})  # type: ignore[no-any-return]


# One effect call per part of the context, as an async handler makes it...
ASYNC_CALLS: dict[str, Callable[[Any, int], Awaitable[Any]]] = {
    "db": lambda ctx, n: ctx.db.insert("notes.Note", {"text": f"note {n}"}),
    "db read": lambda ctx, n: ctx.db.select("notes.Note"),
    "jobs": lambda ctx, n: ctx.jobs.enqueue("notes.follow_up"),
    "jobs many": lambda ctx, n: ctx.jobs.enqueue_many([("notes.follow_up", None)]),
    "storage": lambda ctx, n: ctx.storage.put(f"notes/{n}.txt", "hello"),
    "storage read": lambda ctx, n: ctx.storage.get("notes/1.txt"),
    "transport": lambda ctx, n: ctx.transport.send(message(f"note:{n}")),
    "tx": lambda ctx, n: ctx.tx(insert_in_tx),
}
# ...and as a plain handler makes it, without await.
PLAIN_CALLS: dict[str, Callable[[Any, int], Any]] = {
    "db": lambda ctx, n: ctx.db.insert("notes.Note", {"text": f"note {n}"}),
    "db read": lambda ctx, n: ctx.db.select("notes.Note"),
    "jobs": lambda ctx, n: ctx.jobs.enqueue("notes.follow_up"),
    "jobs many": lambda ctx, n: ctx.jobs.enqueue_many([("notes.follow_up", None)]),
    "storage": lambda ctx, n: ctx.storage.put(f"notes/{n}.txt", "hello"),
    "storage read": lambda ctx, n: ctx.storage.get("notes/1.txt"),
    "transport": lambda ctx, n: ctx.transport.send(message(f"note:{n}")),
    "tx": lambda ctx, n: ctx.tx(plain_insert_in_tx),
}
WRITES = {"db": "db", "jobs": "jobs", "jobs many": "jobs", "storage": "storage"}
WRITES |= {"transport": "transport", "tx": "db"}


async def written(s: Setup) -> dict[str, int]:
    return {
        "db": len(await s.store.record_select("notes.Note")),
        "jobs": len(await s.store.job_list(JobQuery(names=("notes.follow_up",)))),
        "storage": len(list(s.storage.rglob("*.txt"))),
        "transport": len(s.sender.sent),
    }


@pytest.mark.parametrize("part", ASYNC_CALLS)
def test_an_effect_call_works_before_the_abort_and_raises_aborted_after(
    tmp_path: Path, part: str
) -> None:
    async def scenario(s: Setup) -> None:
        call = ASYNC_CALLS[part]
        await call(s.ctx, 1)
        before = await written(s)
        if part in WRITES:
            assert before[WRITES[part]] == 1
        s.signal.abort("timeout")
        with pytest.raises(Aborted) as refused:
            await call(s.ctx, 2)
        assert refused.value.reason == "timeout"
        assert await written(s) == before

    run(tmp_path, scenario)


@pytest.mark.parametrize("part", PLAIN_CALLS)
def test_an_effect_call_of_a_plain_handler_raises_aborted_after_the_abort(
    tmp_path: Path, part: str
) -> None:
    def handler(ctx: Any) -> str:
        call = PLAIN_CALLS[part]
        call(ctx, 1)
        ctx.signal.abort("cancelled")
        try:
            call(ctx, 2)
        except Aborted as error:
            return f"refused: {error.reason}"
        return "not refused"

    async def scenario(s: Setup) -> None:
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(1, thread_name_prefix="handler") as pool:
            outcome = await loop.run_in_executor(pool, handler, Blocking(s.ctx, loop))
        assert outcome == "refused: cancelled"
        if part in WRITES:
            assert (await written(s))[WRITES[part]] == 1

    run(tmp_path, scenario)


def test_a_transaction_aborted_midway_writes_nothing(tmp_path: Path) -> None:
    async def scenario(s: Setup) -> None:
        async def aborted_midway(tx: TxContext) -> None:
            await tx.db.insert("notes.Note", {"text": "first"})
            s.signal.abort("lease lost")
            await tx.db.insert("notes.Note", {"text": "second"})

        with pytest.raises(Aborted) as refused:
            await s.ctx.tx(aborted_midway)
        assert refused.value.reason == "lease lost"
        assert await s.store.record_select("notes.Note") == []

    run(tmp_path, scenario)


def test_what_is_not_an_effect_stays_readable_after_the_abort(tmp_path: Path) -> None:
    async def scenario(s: Setup) -> None:
        s.signal.abort("timeout")
        assert s.ctx.signal.reason == "timeout"
        assert s.ctx.job.name == "notes.write"
        assert repr(s.ctx.storage) == "Storage(tenant='acme')"
        s.ctx.log.info("still logs")

    run(tmp_path, scenario)


def test_a_fenced_part_is_read_only() -> None:
    fenced = fence(CaptureSender(), AbortSignal())
    with pytest.raises(AttributeError, match="read-only"):
        fenced.sent = []


SURFACE = {
    "db": ["delete", "get", "insert", "select", "update"],
    "jobs": ["enqueue", "enqueue_many"],
    "storage": ["delete", "get", "list", "put"],
    "transport": ["send"],
    "log": ["debug", "error", "info", "warning"],
}
INTERNALS = {
    "db": ["_records", "_operation", "_models", "_check", "_target"],
    "jobs": ["_insert", "_catalog", "_operation", "_build", "_target"],
    "storage": ["folder", "_root", "_operation", "_allow", "_target"],
    "transport": ["_sender", "_ledger", "_deliver", "_target"],
    "log": ["_base", "_logger"],
}


@pytest.mark.parametrize("part", sorted(SURFACE))
def test_each_part_of_the_context_shows_only_its_documented_operations(
    tmp_path: Path, part: str
) -> None:
    async def scenario(s: Setup) -> None:
        plain = Blocking(s.ctx, asyncio.get_running_loop())
        for ctx in (s.ctx, plain):
            assert dir(getattr(ctx, part)) == SURFACE[part]
            for name in INTERNALS[part]:
                assert not hasattr(getattr(ctx, part), name), f"ctx.{part}.{name} is reachable"

    run(tmp_path, scenario)
