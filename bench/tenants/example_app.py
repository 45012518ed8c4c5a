"""The example app (modules_example: sales, hotel, company; the `erp` deployment's worker settings)
as bench/tenants_bench.py's workers run it with `--app example`.

It is the example's own deployment, with two additions for the bench and nothing else changed:
- `sales.send_confirmation`, the probe, keeps its declaration and its handler (it reads the order
  with `ctx.db`, then sends the mail through `ctx.transport`); the handler is wrapped so that it
  first appends `<tenant> <job id> <time.time()>` to the file named by `KETBENCH_STARTS`, as the
  bench app's probe does;
- a job `benchx.chain`, the `ctx.jobs` path: it inserts an order (`ctx.tx`), takes
  `time.time()`, then runs the example's `confirm_order` handler, whose transaction updates the
  order and enqueues its `sales.send_confirmation` (and its invoice, due in 5 minutes) with
  `tx.jobs`; it appends `@chain <tenant> <its job id> <the mail job's id> <time>` to the same
  file, and the harness waits for the mail job's start.
The schedules are the example's own: `hotel.catch_up` every 15 minutes and `hotel.night_audit`
daily at 03:00 in Asia/Ho_Chi_Minh (which fans out one `hotel.close_day` per company). Each
tenant's database holds one company and one order (`seed`); its schedules' state rows are put
back a day every pass (`SCHEDULES_RESET`), so that every tenant's first sweep fires both
schedules' current tick once, as test_budget_grid.py does.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, TextIO

import modules_example.hotel as hotel_package
import modules_example.sales as sales_package
from modules_example.company import company
from modules_example.sales.handlers import confirm_order
from modules_example.workspace import erp

from ket import define_job, define_module
from ket.declare.deployment import DeploymentDecl

STARTS_ENV = "KETBENCH_STARTS"
PROBE = "sales.send_confirmation"
CHAIN = "benchx.chain"
BACKLOG = PROBE  # 20,000 mails of one tenant: the probes' own job and queue
SCHEDULED = ("hotel.catch_up", "hotel.night_audit")
TOKEN = "ketbench"  # ERP_API_TOKEN for `ket serve` (modules_example.auth reads it)
EMAIL = "probe@example.com"


def _start_file() -> TextIO | None:
    path = os.environ.get(STARTS_ENV)
    return None if not path else open(path, "a", encoding="ascii", buffering=1)


_starts = _start_file()


def _write(line: str) -> None:
    if _starts is not None:
        _starts.write(line + "\n")


def _recording(handler: Any) -> Any:
    """The example's handler, after a line saying when it started."""

    @functools.wraps(handler)
    async def recorded(ctx: Any, input: Any) -> Any:
        started = time.time()
        _write(f"{ctx.tenant} {ctx.job.id} {started!r}")
        return await handler(ctx, input)

    return recorded


class _OrderRef:
    def __init__(self, order_id: str) -> None:
        self.order_id = order_id


async def chain(ctx: Any, input: Any) -> None:
    """A new order, then the example's confirm_order: its ctx.tx enqueues the mail job."""

    async def place(tx: Any) -> str:
        number = f"chain-{ctx.job.id}"
        order_id: str = await tx.db.insert(
            "sales.Order", {"number": number, "email": EMAIL, "status": "new"}
        )
        return order_id

    order_id = await ctx.tx(place)
    sent = time.time()
    confirmed = await confirm_order(ctx, _OrderRef(order_id))
    _write(f"@chain {ctx.tenant} {ctx.job.id} {confirmed['confirmation_job']} {sent!r}")


def deployment() -> DeploymentDecl:
    sales = sales_package.sales
    probe = sales.jobs["send_confirmation"]
    wrapped = dataclasses.replace(probe, handler=_recording(probe.handler))
    sales = dataclasses.replace(sales, jobs={**sales.jobs, "send_confirmation": wrapped})
    bench = define_module(
        name="benchx",
        jobs={
            "chain": define_job(
                effects=[
                    "write:sales.Order",
                    "enqueue:sales.send_confirmation",
                    "enqueue:sales.issue_invoice",
                ],
                idempotent=True,
                handler=chain,
            )
        },
    )
    return dataclasses.replace(erp, modules=(sales, hotel_package.hotel, company, bench))


example = deployment()


def schedules() -> dict[str, Any]:
    """Schedule job -> its schedule (tick_at, next_tick), from the catalog."""
    from ket.catalog import Catalog

    catalog = Catalog.build(example)
    return {name: catalog.job(name).schedule for name in SCHEDULED}


async def seed(url: str) -> None:
    """The template's rows: a company (night_audit's fan-out) and an order (the probes')."""
    store = await _open(url)
    try:
        if not await store.record_select("company.Company", limit=1):
            await store.record_insert("company.Company", {"name": "Saigon Inn", "code": "SGN"})
        if not await store.record_select("sales.Order", where={"number": "probe"}, limit=1):
            await store.record_insert(
                "sales.Order", {"number": "probe", "email": EMAIL, "status": "confirmed"}
            )
    finally:
        await store.close()


async def probe_order(url: str) -> str:
    """The seeded order's id (the same in every tenant: each is a copy of the template)."""
    store = await _open(url)
    try:
        rows = await store.record_select("sales.Order", where={"number": "probe"}, limit=1)
    finally:
        await store.close()
    return str(rows[0]["id"])


async def _open(url: str) -> Any:
    """The tenant's store, serving the app's models."""
    from ket.catalog import Catalog
    from ket.runtime.contexts import install_models
    from ket.store.sql import SqlStore

    store = await SqlStore.open(url)
    await install_models(store, Catalog.build(example))
    return store


def schedules_reset() -> list[tuple[str, tuple[str, str]]]:
    """Statements that put each schedule's state a day back (its first sweep fires its tick)."""
    return [
        (
            "INSERT INTO ket_schedules (schedule_id, fingerprint, last_tick, updated_at) "
            "VALUES (%s, %s, now() - interval '1 day', now()) ON CONFLICT (schedule_id) DO "
            "UPDATE SET fingerprint = excluded.fingerprint, last_tick = excluded.last_tick, "
            "updated_at = excluded.updated_at, paused = false",
            (name, schedule.fingerprint),
        )
        for name, schedule in schedules().items()
    ]
