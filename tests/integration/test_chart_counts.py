"""The charts' counts equal the job table's over a drain: jobs that complete, fail and are
retried, and give up, run by the worker's per-job step (the test deployment's drain), then
counted as the workers count them; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from ket import define_deployment, define_job, define_module
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.store.types import JobMinutes, MinuteQuery
from ket.testing import create_test_deployment


async def ok(ctx: Any, input: Any) -> None:
    """Completes."""


async def flaky(ctx: Any, input: Any) -> None:
    """Fails its first attempt."""
    if ctx.job.attempt == 1:
        raise RuntimeError("not yet")


async def broken(ctx: Any, input: Any) -> None:
    """Always fails."""
    raise RuntimeError("broken")


shop = define_module(
    name="shop",
    jobs={
        "ok": define_job(idempotent=True, handler=ok),
        "flaky": define_job(idempotent=True, queue="mail", max_attempts=3, handler=flaky),
        "broken": define_job(idempotent=True, queue="mail", max_attempts=2, handler=broken),
    },
)
DEPLOYMENT = define_deployment(
    name="shop", modules=[shop], worker={"queues": {"default": 2, "mail": 2}}
)


def _counted(url: str, clock: ManualClock, every: float) -> JobMinutes:
    """Two counts, a minute apart (the second counts what the first marked), and the minutes
    counted since an hour before the clock's start."""

    async def main() -> JobMinutes:
        store = await SqlStore.open(url, clock=clock)
        try:
            for _ in range(2):
                clock.advance(seconds=every)
                assert await store.minute_record(every) is True
            return await store.minute_list(MinuteQuery(since=clock.now() - timedelta(days=1)))
        finally:
            await store.close()

    return asyncio.run(main())


def _mark(url: str, clock: ManualClock) -> None:
    async def main() -> None:
        store = await SqlStore.open(url, clock=clock)
        try:
            assert await store.minute_record(60) is True
        finally:
            await store.close()

    asyncio.run(main())


def test_the_charts_counts_equal_the_job_table_over_a_drain(tenant_database: str) -> None:
    with create_test_deployment(DEPLOYMENT, database_url=tenant_database) as d:
        _mark(tenant_database, d.clock)  # counting starts here
        d.clock.advance(seconds=5)
        for _ in range(5):
            d.enqueue("shop.ok")
        for _ in range(3):
            d.enqueue("shop.flaky")
        for _ in range(2):
            d.enqueue("shop.broken")
        for _ in range(4):  # the retries come after their backoff
            d.drain_jobs()
            d.clock.advance(minutes=30)
        records = d.jobs()
        found = _counted(tenant_database, d.clock, 60)

    by_state = {s: sum(r.state == s for r in records) for s in ("completed", "discarded")}
    assert by_state == {"completed": 8, "discarded": 2}  # the drain is over: all finished
    errors = [e for r in records for e in r.errors]
    # retried: every failed attempt but the last of a job that gave up
    retried = len(errors) - by_state["discarded"]
    assert (len(errors), retried) == (3 + 2 * 2, 5)
    totals = {
        name: sum(getattr(m, name) for m in found.minutes)
        for name in ("enqueued", "completed", "failed", "discarded", "cancelled")
    }
    assert totals == {
        "enqueued": len(records),
        "completed": by_state["completed"],
        "failed": retried,
        "discarded": by_state["discarded"],
        "cancelled": 0,
    }
    per_queue = {
        queue: sum(m.completed + m.discarded for m in found.minutes if m.queue == queue)
        for queue in ("default", "mail")
    }
    assert per_queue == {"default": 5, "mail": 5}
    assert found.counted_until is not None
