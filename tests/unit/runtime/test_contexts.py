"""A job's context as the runtime builds it: read-only whatever the handler tries, its parts the
attempt's own (fenced by its signal alone), and every documented member in sight."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.catalog import Catalog, EnqueueOptions
from ket.context import AbortSignal, JobContext, JobInfo, ScheduleInfo
from ket.errors import Aborted
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event
from ket.store.memory import MemoryStore
from ket.store.types import JobClaim
from ket.testing import create_test_deployment
from ket.transport import CaptureSender


def _handler(ctx: Any, input: Any) -> None: ...


notes = define_module(
    name="notes",
    models={"Note": define_model({"text": "string"})},
    jobs={"write": define_job(idempotent=True, effects=["write:notes.Note"], handler=_handler)},
)
CATALOG = Catalog.build(define_deployment(name="notes", modules=[notes]))
TICK = datetime(2030, 1, 15, 2, 0, tzinfo=UTC)
MEMBERS = {
    "clock",
    "company",
    "db",
    "job",
    "jobs",
    "log",
    "now",
    "schedule",
    "signal",
    "storage",
    "tenant",
    "transport",
    "tx",
}

Attempts = Callable[[int], Awaitable[list[tuple[JobContext, AbortSignal]]]]


def run(tmp_path: Path, scenario: Callable[[MemoryStore, Attempts], Awaitable[None]]) -> None:
    async def main() -> None:
        store = MemoryStore()
        await store.record_install(list(CATALOG.models.values()))
        contexts = Contexts(
            store=store,
            catalog=CATALOG,
            tenant="acme",
            sender=CaptureSender(),
            storage_root=tmp_path,
        )

        async def attempts(count: int) -> list[tuple[JobContext, AbortSignal]]:
            new = [
                CATALOG.new_job("notes.write", None, EnqueueOptions(company="north"))
                for _ in range(count - 1)
            ]
            new.append(CATALOG.new_job("notes.write", tick=TICK, ticks_skipped=2))
            await store.job_insert(new)
            claimed = await store.job_claim(
                JobClaim(queue="default", limit=count, worker_id="w1", lease_seconds=30)
            )
            made = []
            for job in claimed:
                signal = AbortSignal()
                made.append((contexts.for_job(job, CATALOG.job("notes.write"), signal), signal))
            return made

        try:
            await scenario(store, attempts)
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("name", sorted(MEMBERS | {"anything_new"}))
def test_no_member_of_a_jobs_context_can_be_set_or_deleted(tmp_path: Path, name: str) -> None:
    async def scenario(store: MemoryStore, attempts: Attempts) -> None:
        [(ctx, _)] = await attempts(1)
        for made in (False, True):  # before and after the handler first used it
            if made and name in MEMBERS:
                getattr(ctx, name)
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(ctx, name, None)
            with pytest.raises(dataclasses.FrozenInstanceError):
                delattr(ctx, name)

    run(tmp_path, scenario)


def test_each_attempts_parts_are_its_own_and_fenced_by_its_signal_alone(tmp_path: Path) -> None:
    async def scenario(store: MemoryStore, attempts: Attempts) -> None:
        (first, first_signal), (second, _) = await attempts(2)
        assert first.db is first.db and first.db is not second.db
        first_signal.abort("timeout")
        await second.db.insert("notes.Note", {"text": "second attempt"})
        with pytest.raises(Aborted):
            await first.db.insert("notes.Note", {"text": "first attempt"})
        with pytest.raises(Aborted):
            await first.tx(lambda tx: None)
        assert [row["text"] for row in await store.record_select("notes.Note")] == [
            "second attempt"
        ]

    run(tmp_path, scenario)


def test_the_context_describes_its_job_tick_and_tenant(tmp_path: Path) -> None:
    async def scenario(store: MemoryStore, attempts: Attempts) -> None:
        (plain, _), (ticked, _) = await attempts(2)
        assert plain.job == JobInfo(
            id=plain.job.id,
            name="notes.write",
            key=None,
            queue="default",
            attempt=1,
            max_attempts=CATALOG.job("notes.write").max_attempts,
            tenant="acme",
            company="north",
        )
        assert (plain.tenant, plain.company, plain.schedule) == ("acme", "north", None)
        assert ticked.schedule == ScheduleInfo(tick=TICK, skipped=2)
        assert ticked.company is None
        assert ticked.now().tzinfo is not None

    run(tmp_path, scenario)


def test_dir_of_a_jobs_context_lists_every_documented_member_and_no_internals(
    tmp_path: Path,
) -> None:
    async def scenario(store: MemoryStore, attempts: Attempts) -> None:
        [(ctx, _)] = await attempts(1)
        public = {name for name in dir(ctx) if not name.startswith("_")}
        assert public == MEMBERS
        assert not [name for name in dir(ctx) if "source" in name or "contexts" in name]

    run(tmp_path, scenario)


# -- enqueued events of a transaction --------------------------------------------------------


def _confirm(ctx: Any, input: Any) -> str:
    def body(tx: Any) -> None:
        tx.db.insert("shop.Order", {"number": input.number})
        tx.jobs.enqueue("shop.mail", {"number": input.number})
        tx.jobs.enqueue_many([("shop.mail", {"number": f"{input.number}-copy"})])
        if input.number == "refused":
            raise ValueError("refused: the transaction rolls back")

    try:
        ctx.tx(body)
    except ValueError:
        return "rolled back"
    return "committed"


shop = define_module(
    name="shop",
    models={"Order": define_model({"number": "string"})},
    functions={
        "confirm": define_function(
            input={"number": "string"},
            effects=["write:shop.Order", "enqueue:shop.mail"],
            handler=_confirm,
        )
    },
    jobs={"mail": define_job(idempotent=True, input={"number": "string"}, handler=_handler)},
)
SHOP = define_deployment(name="shop", modules=[shop])


def test_jobs_enqueued_in_ctx_tx_are_reported_once_committed_and_never_when_rolled_back(
    tmp_path: Path,
) -> None:
    database = tmp_path / "shop.db"
    with create_test_deployment(SHOP, database_url=f"sqlite:///{database}") as e2e:
        seen: list[tuple[str | None, int | None, bool]] = []

        def enqueued(event: Event) -> None:
            # another connection sees the job when the event comes: it is committed
            with sqlite3.connect(database) as other:
                found = other.execute("SELECT 1 FROM ket_jobs WHERE id = ?", (event.job_id,))
                seen.append((event.name, event.job_id, found.fetchone() is not None))

        e2e.hooks.subscribe(enqueued, ["enqueued"])
        assert e2e.client.call("shop.confirm", {"number": "refused"}) == "rolled back"
        assert seen == []
        assert e2e.client.call("shop.confirm", {"number": "1001"}) == "committed"
        # one event per job, in the order enqueued, each for a job committed by then
        assert seen == [("shop.mail", job.id, True) for job in e2e.jobs()]
        assert len(seen) == 2
