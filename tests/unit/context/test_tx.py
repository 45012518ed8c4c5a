"""`ctx.tx(fn)`: rows and jobs commit together or not at all, for async and plain `fn`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from ket.context.blocking import Blocking
from ket.context.db import Database
from ket.context.tx import Transact, TxContext, build_db_and_tx
from ket.errors import EffectError, StoreError
from ket.store.types import JobQuery
from tests.unit.context.hotel import CATALOG, Scenario, Store, operation

Run = Callable[[Scenario], None]
CLOSE = {"business_date": "2030-01-15", "nights": 3}


class Boom(Exception):
    """The handler's own failure inside the transaction."""


@dataclass(frozen=True)
class Ctx:
    """The two fields of JobContext these tests need."""

    db: Database
    tx: Transact


def ctx_for(store: object, job: str = "hotel.close_day") -> Ctx:
    db, tx = build_db_and_tx(store, CATALOG, operation(job))
    return Ctx(db=db, tx=tx)


async def job_names(store: Store) -> list[str]:
    return [record.name for record in await store.job_list(JobQuery())]


async def in_plain_handler(ctx: Ctx, body: Callable[[Any], Any]) -> Any:
    """Run `body(ctx)` as the worker runs a plain handler: in a thread, through Blocking."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1, thread_name_prefix="handler") as pool:
        return await loop.run_in_executor(pool, body, Blocking(ctx, loop))


def test_an_async_fn_commits_its_rows_and_jobs_and_returns_its_result(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        ctx = ctx_for(store)

        async def close(tx: TxContext) -> str:
            record_id = await tx.db.insert("hotel.DayClose", CLOSE)
            assert await tx.db.get("hotel.DayClose", record_id) is not None  # sees its own write
            await tx.jobs.enqueue("hotel.notify", {"note": "closed"})
            return record_id

        record_id = await ctx.tx(close)
        assert [row["id"] for row in await store.record_select("hotel.DayClose")] == [record_id]
        assert await job_names(store) == ["hotel.notify"]

    on_each_store(scenario)


def test_an_async_fn_that_raises_leaves_neither_rows_nor_jobs(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        ctx = ctx_for(store)
        kept = await store.record_insert("hotel.DayClose", CLOSE)

        async def close(tx: TxContext) -> None:
            await tx.db.insert("hotel.DayClose", {**CLOSE, "business_date": "2030-01-16"})
            await tx.db.update("hotel.DayClose", {"id": kept}, {"nights": 9})
            await tx.jobs.enqueue("hotel.notify", {"note": "closed"})
            raise Boom("after the writes")

        with pytest.raises(Boom, match="after the writes"):
            await ctx.tx(close)
        assert [(r["id"], r["nights"]) for r in await store.record_select("hotel.DayClose")] == [
            (kept, 3)
        ]
        assert await job_names(store) == []

    on_each_store(scenario)


def test_a_plain_fn_in_a_plain_handler_commits_and_runs_in_kets_own_threads(
    on_each_store: Run,
) -> None:
    async def scenario(store: Store) -> None:
        seen: list[str] = []

        def close(tx: Any) -> int:
            seen.append(threading.current_thread().name)
            tx.db.insert("hotel.DayClose", CLOSE)
            inserted = tx.jobs.enqueue("hotel.notify", {"note": "closed"})
            return int(inserted.id)

        def handler(ctx: Any) -> int:
            result: int = ctx.tx(close)  # no await: a plain handler
            return result

        job_id = await in_plain_handler(ctx_for(store), handler)
        assert [record.id for record in await store.job_list(JobQuery())] == [job_id]
        assert len(await store.record_select("hotel.DayClose")) == 1
        # neither the loop's thread, nor the handler's pool, nor the loop's default executor
        assert len(seen) == 1 and seen[0].startswith("ket-tx"), seen

    on_each_store(scenario)


def test_a_plain_fn_that_raises_rolls_back_and_the_plain_handler_sees_it(
    on_each_store: Run,
) -> None:
    async def scenario(store: Store) -> None:
        def close(tx: Any) -> None:
            tx.db.insert("hotel.DayClose", CLOSE)
            tx.jobs.enqueue("hotel.notify", {"note": "closed"})
            raise Boom("plain")

        def handler(ctx: Any) -> str:
            with pytest.raises(Boom, match="plain"):
                ctx.tx(close)
            return "handled"

        assert await in_plain_handler(ctx_for(store), handler) == "handled"
        assert await store.record_select("hotel.DayClose") == []
        assert await job_names(store) == []

    on_each_store(scenario)


def test_an_async_handler_may_pass_a_plain_fn_which_runs_off_the_loop(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        loop_thread = threading.get_ident()

        def close(tx: Any) -> int:
            assert threading.get_ident() != loop_thread
            return int(tx.db.insert("hotel.DayClose", CLOSE) != "")

        assert await ctx_for(store).tx(close) == 1
        assert len(await store.record_select("hotel.DayClose")) == 1

    on_each_store(scenario)


def test_effects_are_enforced_inside_the_transaction_and_roll_it_back(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        ctx = ctx_for(store, "hotel.catch_up")

        async def sneaky_write(tx: TxContext) -> None:
            await tx.db.insert("hotel.Booking", {"room": "1", "status": "new", "nights": 1})

        async def sneaky_enqueue(tx: TxContext) -> None:
            await tx.jobs.enqueue("hotel.notify", {"note": "x"})

        with pytest.raises(EffectError) as writing:
            await ctx.tx(sneaky_write)
        with pytest.raises(EffectError) as enqueueing:
            await ctx.tx(sneaky_enqueue)
        assert str(writing.value) == (
            "hotel.catch_up may not write hotel.Booking: declare the effect 'write:hotel.Booking'"
        )
        assert str(enqueueing.value) == (
            "hotel.catch_up may not enqueue 'hotel.notify': "
            "declare the effect 'enqueue:hotel.notify'"
        )
        assert await store.record_select("hotel.Booking") == []
        assert await job_names(store) == []

    on_each_store(scenario)


def test_a_plain_fn_returning_an_awaitable_is_refused_and_rolled_back(on_each_store: Run) -> None:
    async def scenario(store: Store) -> None:
        async def close(tx: Any) -> None:
            await tx.db.insert("hotel.DayClose", CLOSE)

        def wrapper(tx: Any) -> Any:
            tx.db.insert("hotel.DayClose", CLOSE)
            return close(tx)  # a coroutine the plain fn cannot await

        with pytest.raises(TypeError, match="returned an awaitable"):
            await ctx_for(store).tx(wrapper)
        assert await store.record_select("hotel.DayClose") == []

    on_each_store(scenario)


def test_a_store_without_transactions_is_a_store_error() -> None:
    class JobsOnly:
        """Any store that is not a TransactionalStore."""

    async def fn(tx: TxContext) -> None:
        raise AssertionError("never called")

    async def main() -> None:
        await ctx_for(JobsOnly(), "hotel.catch_up").tx(fn)

    with pytest.raises(StoreError) as raised:
        asyncio.run(main())
    assert str(raised.value) == (
        "hotel.catch_up: store JobsOnly cannot run ctx.tx (it is not a TransactionalStore)"
    )
