"""Wake-ups (capability PushStore): an insert wakes waiters on its queue; silence times out.

Wake-ups are hints and may be spurious, so the kit never asserts that a waiter stays asleep after
a given insert; it asserts that an insert wakes waiters promptly, and that with no insert at all a
waiter times out (after at most a few spurious wake-ups, such as a listener's first connect).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection

from ket.store.contract import JobStore, PushStore
from ket.tck.arrange import new_job, pushable, quiet
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_wait_for_jobs_times_out_with_false_when_nothing_is_inserted",
    "test_wait_for_jobs_wakes_every_waiting_replica",
    "test_wait_for_jobs_wakes_for_any_of_its_queues",
    "test_wait_for_jobs_wakes_promptly_after_an_insert_into_a_waited_queue",
    "test_wait_for_jobs_wakes_promptly_after_an_insert_through_another_replica",
]

WAIT = 5.0  # the longest a waiter waits; a wake-up must come well before it
PROMPT = 2.0  # how soon after the insert a wake-up must arrive
# Real time for a waiter to start listening (a PostgreSQL LISTEN, say) before the insert: a
# notification sent before anyone listens is lost by design, and polling covers it.
SUBSCRIBE = 0.1


async def _woken(waiters: list[PushStore], queues: Collection[str], inserter: JobStore) -> None:
    """Every waiter on `queues` returns True within PROMPT seconds of one insert by `inserter`."""
    for waiter in waiters:  # listening, and past any wake-up of its own start
        await quiet(waiter, queues)
    tasks = [asyncio.create_task(w.wait_for_jobs(queues, WAIT)) for w in waiters]
    await asyncio.sleep(SUBSCRIBE)
    started = time.monotonic()
    await inserter.job_insert([new_job(queue=sorted(queues)[-1])])
    results = await asyncio.gather(*tasks)
    elapsed = time.monotonic() - started
    assert results == [True] * len(waiters)
    assert elapsed < PROMPT, f"woken {elapsed:.2f} s after the insert"


@tck_test
async def test_wait_for_jobs_wakes_promptly_after_an_insert_into_a_waited_queue(t: Tck) -> None:
    await _woken([pushable(t)], ["mail"], t.store)


@tck_test
async def test_wait_for_jobs_wakes_for_any_of_its_queues(t: Tck) -> None:
    await _woken([pushable(t)], ["mail", "sms"], t.store)  # the insert goes to "sms"


@tck_test
async def test_wait_for_jobs_wakes_promptly_after_an_insert_through_another_replica(
    t: Tck,
) -> None:
    waiter = pushable(t)
    await _woken([waiter], ["mail"], await t.replica())


@tck_test
async def test_wait_for_jobs_wakes_every_waiting_replica(t: Tck) -> None:
    waiters: list[PushStore] = [pushable(t)]
    for _ in range(2):
        replica = await t.replica()
        assert isinstance(replica, PushStore), "a replica lacks the capability its store has"
        waiters.append(replica)
    await _woken(waiters, ["mail"], t.store)


@tck_test
async def test_wait_for_jobs_times_out_with_false_when_nothing_is_inserted(t: Tck) -> None:
    elapsed = await quiet(pushable(t), ["mail"], wait=0.2)
    assert 0.15 <= elapsed < PROMPT, f"a 0.2 s wait took {elapsed:.2f} s"
