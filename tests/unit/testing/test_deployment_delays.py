"""Delays and ISO times through the test helpers and a handler's ctx.jobs (async and plain): a
delay counts from the controllable clock, so `clock.advance` is what makes the job due."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ket import define_deployment, define_function, define_job, define_module
from ket.errors import JobRejected
from ket.testing import create_test_deployment

ran: list[str] = []


async def ping(ctx: Any, input: Any) -> None:
    ran.append(input.note)


async def later_async(ctx: Any, input: Any) -> list[int]:
    one = await ctx.jobs.enqueue("t.ping", {"note": "async"}, run_in=timedelta(minutes=5))
    many = await ctx.jobs.enqueue_many(
        [("t.ping", {"note": "many"}, {"run_in": "1h"}), ("t.ping", {"note": "now"})]
    )
    return [one.id, *(inserted.id for inserted in many)]


def later_plain(ctx: Any, input: Any) -> int:
    return int(ctx.jobs.enqueue("t.ping", {"note": "plain"}, run_in=90).id)


def _deployment() -> Any:
    module = define_module(
        name="t",
        jobs={"ping": define_job(idempotent=True, input={"note": "string"}, handler=ping)},
        functions={
            name: define_function(effects=["enqueue:t.ping"], handler=handler)
            for name, handler in (("later_async", later_async), ("later_plain", later_plain))
        },
    )
    return define_deployment(name="t", modules=[module])


def test_a_delay_counts_from_the_test_clock_and_advancing_it_runs_the_job() -> None:
    ran.clear()
    with create_test_deployment(_deployment()) as e2e:
        start = e2e.clock.now()
        e2e.enqueue("t.ping", {"note": "soon"}, run_in="5m")
        [job] = e2e.jobs()
        assert (job.state, job.run_at) == ("scheduled", start + timedelta(minutes=5))
        assert e2e.drain_jobs() == 0
        e2e.clock.advance(minutes=5)
        assert e2e.drain_jobs() == 1
    assert ran == ["soon"]


def test_run_at_takes_an_iso_time_with_an_offset_in_the_test_helpers() -> None:
    with create_test_deployment(_deployment(), worker=False) as e2e:
        e2e.clock.set(datetime(2026, 12, 24, 7, 0, tzinfo=UTC))
        e2e.enqueue("t.ping", {"note": "x"}, run_at="2026-12-24T09:00:00+01:00")
        e2e.assert_enqueued("t.ping", run_at=datetime(2026, 12, 24, 8, 0, tzinfo=UTC))
        with pytest.raises(JobRejected, match="'2026-12-24T09:00:00'"):
            e2e.enqueue("t.ping", {"note": "x"}, run_at="2026-12-24T09:00:00")
        with pytest.raises(JobRejected, match="not both"):
            e2e.enqueue("t.ping", {"note": "x"}, run_in="5m", run_at="2026-12-24T09:00:00Z")


def test_a_handler_delays_its_enqueues_async_plain_and_in_bulk() -> None:
    with create_test_deployment(_deployment(), worker=False) as e2e:
        now = e2e.clock.now()
        e2e.client.call("t.later_async")
        e2e.client.call("t.later_plain")
        due = {job.payload["note"]: job.run_at - now for job in e2e.jobs()}
    assert due == {
        "async": timedelta(minutes=5),
        "many": timedelta(hours=1),
        "now": timedelta(0),
        "plain": timedelta(seconds=90),
    }
