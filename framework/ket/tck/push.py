"""Wake-ups (capability PushStore): whatever makes work claimable at once wakes waiters on its
queue; silence, and work that ends, time out.

Work becomes claimable at once through an insert, an operator retry, a settlement that hands a
job back (a snooze) or fails it (retryable) with no delay, and a rescue of an expired lease; each
must wake idle workers promptly, or the job waits for their next poll.

Wake-ups are hints and may be spurious (a listener's first connect wakes everyone once), so
before each check the waiter is let `quiet` down. After that, a completion must not wake it: a
store waking idle workers on every completion would make them claim in vain at the rate jobs
finish. Every check uses queues of its own (`fresh_queue`), which no other test shares.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection

from ket.store.contract import JobStore, PushStore
from ket.tck.arrange import (
    LEASE,
    arrange,
    claim_only,
    fresh_queue,
    insert_one,
    new_job,
    pushable,
    quiet,
    settle,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_closed_watch_is_woken_by_nothing",
    "test_wait_for_jobs_is_not_woken_by_a_completion",
    "test_wait_for_jobs_times_out_with_false_when_nothing_is_inserted",
    "test_wait_for_jobs_wakes_after_a_failure_retryable_at_once",
    "test_wait_for_jobs_wakes_after_a_job_is_handed_back_with_a_zero_delay_snooze",
    "test_wait_for_jobs_wakes_after_an_expired_lease_is_rescued",
    "test_wait_for_jobs_wakes_after_an_operator_retry",
    "test_wait_for_jobs_wakes_every_waiting_replica",
    "test_wait_for_jobs_wakes_for_any_of_its_queues",
    "test_wait_for_jobs_wakes_promptly_after_an_insert_into_a_waited_queue",
    "test_wait_for_jobs_wakes_promptly_after_an_insert_through_another_replica",
    "test_watch_for_jobs_is_in_place_when_it_returns_and_woken_without_being_awaited",
    "test_watch_for_jobs_times_out_with_false",
]

WAIT = 5.0  # the longest a waiter waits; a wake-up must come well before it
PROMPT = 2.0  # how soon after the insert a wake-up must arrive
# Real time for a waiter to start listening (a PostgreSQL LISTEN, say) before the insert: a
# notification sent before anyone listens is lost by design, and polling covers it.
SUBSCRIBE = 0.1
ASLEEP = 0.5  # how long a waiter that nothing should wake is watched

Action = Callable[[], Awaitable[object]]


async def _woken(waiters: list[PushStore], queues: Collection[str], action: Action) -> None:
    """Every waiter on `queues` returns True within PROMPT seconds of `action`."""
    for waiter in waiters:  # listening, and past any wake-up of its own start
        await quiet(waiter, queues)
    tasks = [asyncio.create_task(w.wait_for_jobs(queues, WAIT)) for w in waiters]
    await asyncio.sleep(SUBSCRIBE)
    started = time.monotonic()
    await action()
    results = await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    assert results == [True] * len(waiters)
    assert elapsed < PROMPT, f"woken {elapsed:.2f} s after the change"


def _inserting(store: JobStore, queue: str) -> Action:
    return lambda: store.job_insert([new_job(queue=queue)])


@tck_test
async def test_wait_for_jobs_wakes_promptly_after_an_insert_into_a_waited_queue(t: Tck) -> None:
    await _woken([pushable(t)], ["mail"], _inserting(t.store, "mail"))


@tck_test
async def test_wait_for_jobs_wakes_for_any_of_its_queues(t: Tck) -> None:
    await _woken([pushable(t)], ["mail", "sms"], _inserting(t.store, "sms"))


@tck_test
async def test_wait_for_jobs_wakes_promptly_after_an_insert_through_another_replica(
    t: Tck,
) -> None:
    waiter = pushable(t)
    await _woken([waiter], ["mail"], _inserting(await t.replica(), "mail"))


@tck_test
async def test_wait_for_jobs_wakes_every_waiting_replica(t: Tck) -> None:
    waiters: list[PushStore] = [pushable(t)]
    for _ in range(2):
        replica = await t.replica()
        assert isinstance(replica, PushStore), "a replica lacks the capability its store has"
        waiters.append(replica)
    await _woken(waiters, ["mail"], _inserting(t.store, "mail"))


@tck_test
async def test_wait_for_jobs_times_out_with_false_when_nothing_is_inserted(t: Tck) -> None:
    elapsed = await quiet(pushable(t), ["mail"], wait=0.2)
    assert 0.15 <= elapsed < PROMPT, f"a 0.2 s wait took {elapsed:.2f} s"


@tck_test
async def test_wait_for_jobs_wakes_after_an_operator_retry(t: Tck) -> None:
    waiter = pushable(t)
    queue = fresh_queue("retried")
    job_id = await arrange(t, "retryable", queue=queue)  # due in an hour

    async def retry() -> None:
        change = await t.store.job_retry(job_id)
        assert change.state == "available", change

    await _woken([waiter], [queue], retry)


@tck_test
async def test_wait_for_jobs_wakes_after_a_job_is_handed_back_with_a_zero_delay_snooze(
    t: Tck,
) -> None:
    """A worker shutting down hands its unfinished jobs back so another worker takes them now."""
    waiter = pushable(t)
    queue = fresh_queue("handed-back")
    claimed = await claim_only(t.store, await insert_one(t.store, new_job(queue=queue)), queue)
    await _woken([waiter], [queue], lambda: settle(t.store, claimed, "snoozed", delay=0))


@tck_test
async def test_wait_for_jobs_wakes_after_a_failure_retryable_at_once(t: Tck) -> None:
    waiter = pushable(t)
    queue = fresh_queue("failed")
    claimed = await claim_only(t.store, await insert_one(t.store, new_job(queue=queue)), queue)
    await _woken([waiter], [queue], lambda: settle(t.store, claimed, "retryable", error="boom"))


@tck_test
async def test_wait_for_jobs_wakes_after_an_expired_lease_is_rescued(t: Tck) -> None:
    waiter = pushable(t)
    queue = fresh_queue("rescued")
    job_id = await insert_one(t.store, new_job(queue=queue))
    await claim_only(t.store, job_id, queue)
    t.clock.advance(seconds=LEASE + 1)

    async def rescue() -> None:
        rescued = await t.store.job_rescue()
        assert [(r.id, r.state) for r in rescued] == [(job_id, "retryable")], rescued

    await _woken([waiter], [queue], rescue)


@tck_test
async def test_wait_for_jobs_is_not_woken_by_a_completion(t: Tck) -> None:
    waiter = pushable(t)
    queue = fresh_queue("completed")
    claimed = await claim_only(t.store, await insert_one(t.store, new_job(queue=queue)), queue)
    await quiet(waiter, [queue])
    task = asyncio.create_task(waiter.wait_for_jobs([queue], ASLEEP))
    await asyncio.sleep(SUBSCRIBE)
    await settle(t.store, claimed, "completed")
    assert await task is False, "a completion woke a waiter: nothing became claimable"


@tck_test
async def test_watch_for_jobs_is_in_place_when_it_returns_and_woken_without_being_awaited(
    t: Tck,
) -> None:
    """A claim loop watches before its claim, and parks on the watch after it, holding no
    task: a job committed in between must resolve the watch with nobody awaiting it."""
    waiter, queue = await _quiet_queue(t, "watched")
    watch = await waiter.watch_for_jobs([queue], WAIT)
    heard: list[bool] = []
    watch.woken.add_done_callback(lambda woken: heard.append(woken.result()))
    started = time.monotonic()
    await t.store.job_insert([new_job(queue=queue)])  # no pause: the watch is in place
    await asyncio.wait_for(asyncio.shield(watch.woken), PROMPT)
    await asyncio.sleep(0)  # its callback runs
    assert heard == [True]
    assert time.monotonic() - started < PROMPT
    assert watch.outcome() is True


async def _quiet_queue(t: Tck, name: str) -> tuple[PushStore, str]:
    """A waiter, and a queue of its own it is listening to, past any wake-up of its start."""
    waiter = pushable(t)
    queue = fresh_queue(name)
    await quiet(waiter, [queue])
    return waiter, queue


@tck_test
async def test_watch_for_jobs_times_out_with_false(t: Tck) -> None:
    waiter, queue = await _quiet_queue(t, "unwatched")
    started = time.monotonic()
    watch = await waiter.watch_for_jobs([queue], 0.2)
    assert await asyncio.wait_for(asyncio.shield(watch.woken), PROMPT) is False
    assert 0.15 <= time.monotonic() - started < PROMPT
    assert watch.outcome() is False


@tck_test
async def test_a_closed_watch_is_woken_by_nothing(t: Tck) -> None:
    waiter, queue = await _quiet_queue(t, "closed-watch")
    watch = await waiter.watch_for_jobs([queue], WAIT)
    watch.close()
    await t.store.job_insert([new_job(queue=queue)])
    await asyncio.sleep(ASLEEP)
    assert watch.outcome() is False, "a closed watch was woken"
    # and the store's waiters go on: a wait begun now sees the next insert
    await _woken([waiter], [queue], _inserting(t.store, queue))
