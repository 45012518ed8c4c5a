"""Pacing (capability PacedStore): what lets a thousand idle tenants cost little. A queue with no
due job may wait long (`idle_poll`), so the store must wake it when a job comes due
(`wake_when_due`), say when the earliest running lease ends (`lease_end`), answer the safety
visit's question (`look`: that, and when each queue's next job is due), wake this process's
waiters on demand (`wake`) or later (`wake_in`), and tell a claim whether a wake-up came after
it began (`woken_since_claim`), so that one wake-up costs one claim.

The waits use PushStore's `wait_for_jobs` too; a store lacking either skips visibly.
"""

from __future__ import annotations

import asyncio
import time

from ket.store.contract import PacedStore, PushStore
from ket.tck.arrange import LEASE, after, claim_only, fresh_queue, insert_one, new_job, quiet
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_idle_poll_is_never_shorter_than_poll_max",
    "test_lease_end_is_none_with_nothing_running_and_the_lease_left_while_one_runs",
    "test_look_says_when_each_queue_has_a_job_due_and_when_the_earliest_lease_ends",
    "test_wake_in_wakes_the_queue_then_and_keeps_the_earliest",
    "test_wake_wakes_this_processs_waiters_at_once",
    "test_wake_when_due_sets_no_wake_up_when_nothing_is_due",
    "test_wake_when_due_wakes_the_queue_when_its_next_job_comes_due",
    "test_woken_since_claim_says_whether_a_wake_up_came_after_the_claim_began",
]

DUE_IN = 1.0  # seconds until the job comes due
EARLY = 0.5  # a wake-up this much before the job is due was not the due time's
WAIT = 5.0


def _paced(t: Tck) -> PacedStore:
    t.require(PushStore)  # type: ignore[type-abstract]
    return t.require(PacedStore)  # type: ignore[type-abstract]


def _push(t: Tck) -> PushStore:
    return t.require(PushStore)  # type: ignore[type-abstract]


@tck_test
async def test_wake_when_due_wakes_the_queue_when_its_next_job_comes_due(t: Tck) -> None:
    paced, push = _paced(t), _push(t)
    queue = fresh_queue("due")
    await insert_one(t.store, new_job(queue=queue, run_at=after(t, DUE_IN)))
    await quiet(push, [queue])
    started = time.monotonic()
    await paced.wake_when_due(queue)
    assert await push.wait_for_jobs([queue], WAIT)
    woken = time.monotonic() - started
    assert woken > DUE_IN - EARLY, f"woken {woken:.2f} s in, {DUE_IN} s before the job is due"


@tck_test
async def test_wake_when_due_sets_no_wake_up_when_nothing_is_due(t: Tck) -> None:
    paced, push = _paced(t), _push(t)
    queue = fresh_queue("none")
    await quiet(push, [queue])
    await paced.wake_when_due(queue)
    assert not await push.wait_for_jobs([queue], DUE_IN + EARLY)


@tck_test
async def test_lease_end_is_none_with_nothing_running_and_the_lease_left_while_one_runs(
    t: Tck,
) -> None:
    paced = _paced(t)
    queue = fresh_queue("lease")
    before = await paced.lease_end()
    job_id = await insert_one(t.store, new_job(queue=queue))
    await claim_only(t.store, job_id, queue, lease=LEASE)
    left = await paced.lease_end()
    assert before is None  # a fresh database: nothing runs yet
    assert left is not None and 0.0 < left <= LEASE, left


@tck_test
async def test_look_says_when_each_queue_has_a_job_due_and_when_the_earliest_lease_ends(
    t: Tck,
) -> None:
    paced = _paced(t)
    now, later, running, empty = (fresh_queue(label) for label in ("now", "later", "run", "e"))
    await insert_one(t.store, new_job(queue=now))
    await insert_one(t.store, new_job(queue=now, run_at=after(t, 600)))
    await insert_one(t.store, new_job(queue=later, run_at=after(t, 60)))
    await insert_one(t.store, new_job(queue=later, run_at=after(t, 120)))
    looked = await paced.look([now, later, empty])
    assert looked.due.get(now) == 0.0  # one is due now: the later one does not count
    assert 55.0 < looked.due[later] <= 60.0, looked.due  # its earliest
    assert empty not in looked.due
    job_id = await insert_one(t.store, new_job(queue=running))
    await claim_only(t.store, job_id, running, lease=LEASE)
    looked = await paced.look([running])
    assert running not in looked.due  # its one job runs
    assert looked.lease_end is not None and 0.0 < looked.lease_end <= LEASE, looked


@tck_test
async def test_wake_in_wakes_the_queue_then_and_keeps_the_earliest(t: Tck) -> None:
    paced, push = _paced(t), _push(t)
    queue = fresh_queue("in")
    await quiet(push, [queue])
    started = time.monotonic()
    paced.wake_in(queue, DUE_IN)
    paced.wake_in(queue, 60.0)  # later: the earlier one stands
    assert await push.wait_for_jobs([queue], WAIT)
    woken = time.monotonic() - started
    assert DUE_IN - EARLY < woken < DUE_IN + 2.0, f"woken {woken:.2f} s in, asked for {DUE_IN} s"


@tck_test
async def test_idle_poll_is_never_shorter_than_poll_max(t: Tck) -> None:
    paced = _paced(t)
    for poll_max in (0.05, 2.0, 30.0):
        assert paced.idle_poll(poll_max) >= poll_max


@tck_test
async def test_wake_wakes_this_processs_waiters_at_once(t: Tck) -> None:
    paced, push = _paced(t), _push(t)
    queue = fresh_queue("wake")
    await quiet(push, [queue])
    task = asyncio.ensure_future(push.wait_for_jobs([queue], WAIT))
    await asyncio.sleep(0.05)  # waiting
    started = time.monotonic()
    paced.wake([queue])
    assert await task
    assert time.monotonic() - started < 1.0  # at once, not at the next poll


@tck_test
async def test_woken_since_claim_says_whether_a_wake_up_came_after_the_claim_began(
    t: Tck,
) -> None:
    paced = _paced(t)
    queue = fresh_queue("since")
    job_id = await insert_one(t.store, new_job(queue=queue))
    await claim_only(t.store, job_id, queue)
    assert not paced.woken_since_claim(queue)
    paced.wake([queue])
    assert paced.woken_since_claim(queue)
