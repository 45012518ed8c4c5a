"""Jobs per minute (capability MinuteStore), for the dashboard's charts: a count adds to each
minute and queue the jobs enqueued, completed, discarded and cancelled in it and the attempts
that failed and were retried, one count late (what was committed by the count before); it
samples each queue's backlog; one count runs per interval whichever replica asks; minutes older
than two days are dropped.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from ket.errors import JobRejected
from ket.store.contract import MinuteStore
from ket.store.types import MINUTES_KEPT, JobMinute, MinuteQuery
from ket.tck.arrange import claim, claim_only, fresh_queue, insert, new_job, settle
from ket.tck.harness import EPOCH, Tck, tck_test

__all__ = [
    "test_a_count_adds_each_job_to_the_minute_it_was_enqueued_failed_and_finished_in",
    "test_a_count_samples_each_queue_s_backlog",
    "test_a_minute_list_refuses_a_bound_without_a_timezone",
    "test_minutes_older_than_two_days_are_dropped",
    "test_one_count_runs_per_interval_whichever_replica_asks",
]

EVERY = 60.0


def _minutes(t: Tck) -> MinuteStore:
    return t.require(MinuteStore)  # type: ignore[type-abstract]


async def _listed(store: MinuteStore, queue: str) -> list[JobMinute]:
    found = await store.minute_list(MinuteQuery(since=EPOCH - timedelta(days=3)))
    return [m for m in found.minutes if m.queue == queue]


@tck_test
async def test_a_count_adds_each_job_to_the_minute_it_was_enqueued_failed_and_finished_in(
    t: Tck,
) -> None:
    minutes = _minutes(t)
    queue = fresh_queue("counted")
    assert await minutes.minute_record(EVERY) is True  # the first count sets its marks
    assert (await minutes.minute_list(MinuteQuery(since=EPOCH))).counted_until is None
    t.clock.advance(seconds=10)
    done, retried, gave_up, cancelled = await insert(
        t.store, *(new_job(queue=queue, max_attempts=2) for _ in range(4))
    )
    claimed = {job.id: job for job in await claim(t.store, queue, limit=4, lease=600)}
    await settle(t.store, claimed[done], "completed")
    await settle(t.store, claimed[retried], "retryable", error="boom")
    t.clock.advance(seconds=60)  # into the next minute
    again = await claim_only(t.store, retried, queue)
    await settle(t.store, again, "discarded", error="boom again")
    await settle(t.store, claimed[gave_up], "discarded", error="bad")
    await settle(t.store, claimed[cancelled], "cancelled")
    t.clock.advance(seconds=1)
    # counted one count late: the next count only marks what is committed by then
    assert await minutes.minute_record(EVERY) is True
    assert [m for m in await _listed(minutes, queue) if m.enqueued or m.completed] == []
    assert (await minutes.minute_list(MinuteQuery(since=EPOCH))).counted_until == EPOCH
    t.clock.advance(seconds=60)
    assert await minutes.minute_record(EVERY) is True
    # counted: everything up to the count before this one
    counted = await minutes.minute_list(MinuteQuery(since=EPOCH))
    assert counted.counted_until == EPOCH + timedelta(seconds=71)
    first, second = EPOCH, EPOCH + timedelta(minutes=1)
    assert [
        (m.minute, m.enqueued, m.completed, m.failed, m.discarded, m.cancelled)
        for m in (await _listed(minutes, queue))
    ] == [(first, 4, 1, 1, 0, 0), (second, 0, 0, 0, 2, 1)]
    t.clock.advance(seconds=60)
    assert await minutes.minute_record(EVERY) is True  # nothing counted twice
    assert [
        (m.enqueued, m.completed, m.failed, m.discarded, m.cancelled)
        for m in (await _listed(minutes, queue))
    ] == [(4, 1, 1, 0, 0), (0, 0, 0, 2, 1)]


@tck_test
async def test_a_count_samples_each_queue_s_backlog(t: Tck) -> None:
    minutes = _minutes(t)
    queue, later = fresh_queue("backlog"), fresh_queue("later")
    await insert(t.store, new_job(queue=queue), new_job(queue=queue))
    await insert(t.store, new_job(queue=later, run_at=EPOCH + timedelta(hours=1)))
    t.clock.advance(seconds=90)
    assert await minutes.minute_record(EVERY) is True
    [sampled] = await _listed(minutes, queue)
    assert (sampled.minute, sampled.available, sampled.oldest_available_ms) == (
        EPOCH + timedelta(minutes=1),
        2,
        90_000,
    )
    assert await _listed(minutes, later) == []  # not due: no backlog


@tck_test
async def test_one_count_runs_per_interval_whichever_replica_asks(t: Tck) -> None:
    minutes = _minutes(t)
    replica = await t.replica()
    assert isinstance(replica, MinuteStore)
    assert await minutes.minute_record(EVERY) is True
    t.clock.advance(seconds=EVERY - 1)
    assert await replica.minute_record(EVERY) is False
    assert await minutes.minute_record(EVERY) is False
    t.clock.advance(seconds=1)
    assert await replica.minute_record(EVERY) is True
    assert await minutes.minute_record(EVERY) is False


@tck_test
async def test_minutes_older_than_two_days_are_dropped(t: Tck) -> None:
    minutes = _minutes(t)
    queue = fresh_queue("kept")
    assert await minutes.minute_record(EVERY) is True
    await insert(t.store, new_job(queue=queue))
    t.clock.advance(seconds=EVERY)
    assert await minutes.minute_record(EVERY) is True
    assert len(await _listed(minutes, queue)) == 1  # the backlog sampled
    t.clock.advance(seconds=(MINUTES_KEPT - timedelta(seconds=EVERY)).total_seconds())
    assert await minutes.minute_record(EVERY) is True
    enqueued, sampled, two_days = EPOCH, EPOCH + timedelta(minutes=1), EPOCH + MINUTES_KEPT
    assert [m.minute for m in await _listed(minutes, queue)] == [enqueued, sampled, two_days]
    t.clock.advance(seconds=EVERY)
    assert await minutes.minute_record(EVERY) is True
    assert [m.minute for m in await _listed(minutes, queue)] == [
        sampled,
        two_days,
        two_days + timedelta(minutes=1),
    ]


@tck_test
async def test_a_minute_list_refuses_a_bound_without_a_timezone(t: Tck) -> None:
    minutes = _minutes(t)
    with pytest.raises(JobRejected, match=r"MinuteQuery\.since must be a timezone-aware"):
        await minutes.minute_list(MinuteQuery(since=EPOCH.replace(tzinfo=None)))
