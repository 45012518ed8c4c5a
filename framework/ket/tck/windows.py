"""Uniqueness windows and debounce (`NewJob.window`): an enqueue joins an earlier job of its
name and window key instead of writing one.

A window joins the newest job of the key enqueued within its period that is in one of its
states; the key is free again when the period has passed, or while no job of it is in those
states. A debounce gives the newest job of the key that has not started the new job's input,
options and run time, no later than its max wait after its first enqueue, and keeps its id; a
job that started is left alone, and the enqueue writes a new one. Racing producers of one key
leave one job.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ket.store.types import Inserted, JobState, NewJob, Window
from ket.tck.arrange import (
    after,
    claim,
    claim_only,
    fresh_queue,
    get,
    insert_one,
    new_job,
    settle,
    transactional,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_debounce_gives_the_pending_job_the_new_input_and_run_time",
    "test_a_debounce_never_moves_a_job_past_its_max_wait",
    "test_a_debounce_of_a_job_that_started_writes_a_new_one",
    "test_a_debounced_job_s_expiry_follows_its_new_run_time",
    "test_a_rolled_back_debounce_leaves_the_pending_job_as_it_was",
    "test_a_window_frees_its_key_once_the_period_has_passed",
    "test_a_window_looks_only_at_the_states_it_names",
    "test_an_enqueue_within_a_window_joins_the_job_of_its_key",
    "test_enqueues_of_one_key_in_one_batch_join_the_first",
    "test_racing_producers_of_one_debounce_key_leave_one_job",
    "test_racing_producers_of_one_window_key_leave_one_job",
]

HOUR = Window(
    seconds=3_600, states=("available", "scheduled", "executing", "retryable", "completed")
)
DEBOUNCE = Window(seconds=30, debounce=True)


def windowed(queue: str, key: str, window: Window = HOUR, **fields: Any) -> NewJob:
    """A job of the kit's windowed name under `window`, keyed `key`."""
    return new_job("kit.windowed", queue=queue, window_key=key, window=window, **fields)


async def enqueue(t: Tck, *jobs: NewJob) -> Sequence[Inserted]:
    return await t.store.job_insert(list(jobs))


@tck_test
async def test_an_enqueue_within_a_window_joins_the_job_of_its_key(t: Tck) -> None:
    queue = fresh_queue("window")
    first = await insert_one(t.store, windowed(queue, '["c1"]', payload={"n": 1}))
    t.clock.advance(seconds=3_599)
    [joined] = await enqueue(t, windowed(queue, '["c1"]', payload={"n": 2}))
    assert joined == Inserted(id=first, coalesced=True)
    [other] = await enqueue(t, windowed(queue, '["c2"]', payload={"n": 3}))
    assert other.coalesced is False and other.id != first
    # another job's name with the same key text is another key
    [named] = await enqueue(t, new_job("kit.other", queue=queue, window_key='["c1"]', window=HOUR))
    assert named.coalesced is False
    assert (await get(t, first)).payload == {"n": 1}  # a window writes nothing to its holder
    assert (await get(t, first)).window_key == '["c1"]'


@tck_test
async def test_a_window_frees_its_key_once_the_period_has_passed(t: Tck) -> None:
    queue = fresh_queue("period")
    first = await insert_one(t.store, windowed(queue, "k"))
    await settle(t.store, await claim_only(t.store, first, queue), "completed")
    t.clock.advance(seconds=1_800)
    [joined] = await enqueue(t, windowed(queue, "k"))  # a completed job holds it too
    assert joined == Inserted(id=first, coalesced=True)
    t.clock.advance(seconds=1_800)  # enqueued an hour ago: its window has passed
    [second] = await enqueue(t, windowed(queue, "k"))
    assert second.coalesced is False
    [third] = await enqueue(t, windowed(queue, "k"))
    assert third == Inserted(id=second.id, coalesced=True)


@tck_test
async def test_a_window_looks_only_at_the_states_it_names(t: Tck) -> None:
    queue = fresh_queue("states")
    until_start = Window(seconds=3_600, states=("available", "scheduled"))
    first = await insert_one(t.store, windowed(queue, "k", until_start))
    [joined] = await enqueue(t, windowed(queue, "k", until_start))
    assert joined.id == first and joined.coalesced
    started = await claim(t.store, queue, limit=1)
    assert [c.id for c in started] == [first]
    [second] = await enqueue(t, windowed(queue, "k", until_start))  # the first one runs
    assert second.coalesced is False
    # the default states leave out cancelled and discarded jobs: given-up work holds no key
    cancelled = await insert_one(t.store, windowed(queue, "gone"))
    assert (await t.store.job_cancel(cancelled)).state == "cancelled"
    [fresh] = await enqueue(t, windowed(queue, "gone"))
    assert fresh.coalesced is False


@tck_test
async def test_enqueues_of_one_key_in_one_batch_join_the_first(t: Tck) -> None:
    queue = fresh_queue("batch")
    results = await enqueue(
        t,
        windowed(queue, "a", payload={"n": 1}),
        new_job(queue=queue),
        windowed(queue, "a", payload={"n": 2}),
        windowed(queue, "b", payload={"n": 3}),
    )
    assert [r.coalesced for r in results] == [False, False, True, False]
    assert results[2].id == results[0].id
    assert len({r.id for r in results}) == 3


@tck_test
async def test_a_debounce_gives_the_pending_job_the_new_input_and_run_time(t: Tck) -> None:
    queue = fresh_queue("debounce")
    first = await insert_one(
        t.store, windowed(queue, "k", DEBOUNCE, run_at=after(t, 30), payload={"n": 1})
    )
    t.clock.advance(seconds=20)
    [joined] = await enqueue(
        t,
        windowed(
            queue, "k", DEBOUNCE, run_at=after(t, 30), payload={"n": 2}, priority=5, tags=("x",)
        ),
    )
    assert joined == Inserted(id=first, coalesced=True)
    record = await get(t, first)
    assert (record.payload, record.priority, record.tags) == ({"n": 2}, 5, ("x",))
    assert record.run_at == after(t, 30) and record.state == "scheduled"
    t.clock.advance(seconds=29)
    assert await claim(t.store, queue) == []  # the first run time has passed: it moved
    t.clock.advance(seconds=1)
    [ran] = await claim(t.store, queue)
    assert (ran.id, ran.payload) == (first, {"n": 2})


@tck_test
async def test_a_debounce_never_moves_a_job_past_its_max_wait(t: Tck) -> None:
    queue = fresh_queue("max-wait")
    capped = Window(seconds=30, debounce=True, max_wait_seconds=60)
    first = await insert_one(t.store, windowed(queue, "k", capped, run_at=after(t, 30)))
    enqueued = await t.store.now()
    for n in range(5):
        t.clock.advance(seconds=20)
        [joined] = await enqueue(
            t, windowed(queue, "k", capped, run_at=after(t, 30), payload={"n": n})
        )
        assert joined == Inserted(id=first, coalesced=True)
    record = await get(t, first)
    assert (record.run_at - enqueued).total_seconds() == 60
    assert record.state == "available" and record.payload == {"n": 4}  # 100 s after: due
    [ran] = await claim(t.store, queue)
    assert ran.id == first


@tck_test
async def test_a_debounce_of_a_job_that_started_writes_a_new_one(t: Tck) -> None:
    queue = fresh_queue("started")
    first = await insert_one(t.store, windowed(queue, "k", DEBOUNCE, payload={"n": 1}))
    running = await claim_only(t.store, first, queue)
    [second] = await enqueue(t, windowed(queue, "k", DEBOUNCE, payload={"n": 2}))
    assert second.coalesced is False
    await settle(t.store, running, "retryable", delay=10, error="boom")
    [third] = await enqueue(t, windowed(queue, "k", DEBOUNCE, payload={"n": 3}))
    assert third == Inserted(id=second.id, coalesced=True)  # the retry is not pending work
    assert (await get(t, first)).payload == {"n": 1}
    assert (await get(t, second.id)).payload == {"n": 3}


@tck_test
async def test_a_debounced_job_s_expiry_follows_its_new_run_time(t: Tck) -> None:
    queue = fresh_queue("expiry")
    first = await insert_one(
        t.store, windowed(queue, "k", DEBOUNCE, run_at=after(t, 30), expires_in_seconds=60)
    )
    t.clock.advance(seconds=25)
    await enqueue(t, windowed(queue, "k", DEBOUNCE, run_at=after(t, 30), expires_in_seconds=60))
    assert (await get(t, first)).expires_at == after(t, 90)


class _Boom(Exception):
    pass


@tck_test
async def test_a_rolled_back_debounce_leaves_the_pending_job_as_it_was(t: Tck) -> None:
    store = transactional(t)
    queue = fresh_queue("rolled-back")
    first = await insert_one(
        t.store, windowed(queue, "k", DEBOUNCE, run_at=after(t, 30), payload={"n": 1})
    )
    with pytest.raises(_Boom):
        async with store.transaction() as tx:
            [joined] = await tx.job_insert(
                [windowed(queue, "k", DEBOUNCE, run_at=after(t, 300), payload={"n": 2})]
            )
            assert joined == Inserted(id=first, coalesced=True)
            raise _Boom()
    record = await get(t, first)
    assert (record.payload, record.run_at, record.state) == ({"n": 1}, after(t, 30), "scheduled")
    t.clock.advance(seconds=30)
    assert [c.id for c in await claim(t.store, queue)] == [first]


async def _race(t: Tck, jobs: Sequence[NewJob]) -> list[Inserted]:
    handles = [t.store, *[await t.replica() for _ in range(4)]]
    tasks = [handles[n % len(handles)].job_insert([job]) for n, job in enumerate(jobs)]
    return [r for batch in await asyncio.gather(*tasks) for r in batch]


@tck_test
async def test_racing_producers_of_one_window_key_leave_one_job(t: Tck) -> None:
    queue = fresh_queue("race")
    results = await _race(t, [windowed(queue, "race", payload={"n": n}) for n in range(20)])
    assert len({r.id for r in results}) == 1, results
    assert [r.coalesced for r in results].count(False) == 1
    assert [c.id for c in await claim(t.store, queue, limit=100)] == [results[0].id]


@tck_test
async def test_racing_producers_of_one_debounce_key_leave_one_job(t: Tck) -> None:
    queue = fresh_queue("race-debounce")
    states: tuple[JobState, ...] = ("scheduled",)
    jobs = [
        windowed(queue, "race", DEBOUNCE, run_at=after(t, 30), payload={"n": n}) for n in range(20)
    ]
    results = await _race(t, jobs)
    assert len({r.id for r in results}) == 1, results
    assert [r.coalesced for r in results].count(False) == 1
    record = await get(t, results[0].id)
    assert record.state in states and record.payload["n"] in range(20)
