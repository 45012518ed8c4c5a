"""`ctx.tx(fn)`: model rows and enqueued jobs in one transaction of the tenant database.

    async def confirm(tx):
        await tx.db.update("sales.Order", {"id": order_id}, {"status": "confirmed"})
        await tx.jobs.enqueue("sales.send_confirmation", {"order_id": order_id})

    await ctx.tx(confirm)          # in a plain handler: ctx.tx(confirm) with a plain `confirm`

The rows and the jobs exist if and only if `fn` returns; an exception rolls everything back and
reaches the caller. Wake-ups for the jobs, and their `enqueued` events, go out only after the
commit.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ket.catalog import Catalog, OperationSpec
from ket.context.blocking import Blocking
from ket.context.db import Database, records_of
from ket.context.fence import fence, fence_call
from ket.context.jobs import Jobs
from ket.context.signal import AbortSignal
from ket.errors import StoreError
from ket.store.contract import TransactionalStore
from ket.store.types import Inserted, NewJob

Transact = Callable[[Callable[[Any], Any]], Awaitable[Any]]
# told of the jobs of each insert once the transaction committed (the runtime's lifecycle events)
Committed = Callable[[Sequence[NewJob], Sequence[Inserted]], None]


@dataclass(frozen=True, kw_only=True)
class TxContext:
    """What `fn` receives: `db` and `jobs`, both bound to the one open transaction."""

    db: Database
    jobs: Jobs


class Transactor:
    """Runs `fn(tx)` inside one store transaction: commit on return, rollback on exception.

    `executor` runs plain `fn`s; None means ket's own pool for them. Neither the pool plain
    handlers run in nor the loop's default executor will do: a handler waiting in `ctx.tx` holds
    a thread of the first, and storage and transport I/O (which a plain `fn` may call) run in the
    second, so a full pool would wait on itself.
    """

    # the store ctx.tx runs on is the context's business: kept in mangled slots, off the
    # surface a handler sees through `ctx.tx`
    __slots__ = (
        "__catalog",
        "__committed",
        "__company",
        "__executor",
        "__operation",
        "__signal",
        "__store",
    )

    def __init__(
        self,
        store: object,
        catalog: Catalog,
        operation: OperationSpec,
        executor: Executor | None = None,
        company: str | None = None,
        signal: AbortSignal | None = None,
        *,
        committed: Committed | None = None,
    ) -> None:
        self.__store = store
        self.__catalog = catalog
        self.__operation = operation
        self.__executor = executor
        self.__company = company
        self.__signal = signal
        self.__committed = committed

    def fenced(self, signal: AbortSignal) -> Transact:
        """`run`, for an attempt under `signal`: refused, and its `tx` too, once aborted."""

        async def run(fn: Callable[[Any], Any]) -> Any:
            return await self.run(fn, signal=signal)

        return fence_call(run, signal)  # type: ignore[no-any-return]

    async def run(self, fn: Callable[[Any], Any], *, signal: AbortSignal | None = None) -> Any:
        """`fn(tx)` in one transaction; its result. An `async def fn` is awaited; a plain one
        runs off the event loop and calls `tx` without `await`, as a plain handler does."""
        signal = signal or self.__signal
        if not callable(fn):
            raise TypeError(f"ctx.tx takes a function of one argument, tx; got {fn!r}")
        store = self.__store
        if not isinstance(store, TransactionalStore):
            raise StoreError(
                f"{self.__operation.name}: store {type(store).__name__} cannot run ctx.tx "
                "(it is not a TransactionalStore)"
            )
        inserts: list[tuple[Sequence[NewJob], Sequence[Inserted]]] = []
        committed = self.__committed
        async with store.transaction() as transaction:
            insert = transaction.job_insert
            if committed is not None:
                insert = functools.partial(_kept, insert, inserts)
            db = Database(
                records_of(transaction), self.__operation, self.__catalog.models, self.__company
            )
            jobs = Jobs(self.__catalog, self.__operation, insert, self.__company)
            if signal is not None:  # an aborted attempt writes nothing more
                db, jobs = fence(db, signal), fence(jobs, signal)
            result = await self.__call(fn, TxContext(db=db, jobs=jobs))
        # committed: the jobs exist now (a rollback raised above, and reports none of them)
        if committed is not None:
            for batch, inserted in inserts:
                committed(batch, inserted)
        return result

    async def __call(self, fn: Callable[[Any], Any], tx: TxContext) -> Any:
        """`fn(tx)`: awaited, or a plain `fn` run off the event loop."""
        if _is_async(fn):
            return await fn(tx)
        loop = asyncio.get_running_loop()
        executor = self.__executor or _plain_fn_pool()
        result = await loop.run_in_executor(executor, fn, Blocking(tx, loop))
        if inspect.isawaitable(result):
            _close(result)
            raise TypeError(
                f"ctx.tx ran {fn!r} as a plain function, but it returned an awaitable; "
                "pass the async function itself (not a lambda or wrapper around it)"
            )
        return result


def build_db_and_tx(
    store: object,
    catalog: Catalog,
    operation: OperationSpec,
    executor: Executor | None = None,
    company: str | None = None,
    signal: AbortSignal | None = None,
) -> tuple[Database, Transact]:
    """`ctx.db` and `ctx.tx` for one run of `operation` for `company` against `store`; with a
    `signal`, both refuse every call (Aborted) once it is aborted."""
    db = Database(records_of(store), operation, catalog.models, company)
    tx = Transactor(store, catalog, operation, executor, company, signal).run
    if signal is None:
        return db, tx
    return fence(db, signal), fence_call(tx, signal)


async def _kept(
    insert: Callable[[Sequence[NewJob]], Awaitable[list[Inserted]]],
    inserts: list[tuple[Sequence[NewJob], Sequence[Inserted]]],
    jobs: Sequence[NewJob],
) -> list[Inserted]:
    """`insert(jobs)`, keeping what it inserted for the report after the commit."""
    inserted = await insert(jobs)
    inserts.append((jobs, inserted))
    return inserted


@functools.cache
def _plain_fn_pool() -> ThreadPoolExecutor:
    """The threads plain `fn`s run in, made on first use; they wait only on the event loop."""
    return ThreadPoolExecutor(max_workers=32, thread_name_prefix="ket-tx")


def _is_async(fn: Callable[[Any], Any]) -> bool:
    # functions, methods and partials of them; or an object whose __call__ is async
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)


def _close(awaitable: object) -> None:
    # never-awaited coroutines warn at garbage collection; this one was refused, so close it
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()
