"""Paused queues (capability QueueControl): an operator pauses a queue, no claim on any replica
takes its jobs from then on, the jobs wait (enqueues go on), and a resume gives them back and
wakes the queue's waiters. A paused queue has nothing due for pacing, so that an idle worker does
not claim it in vain (PacedStore, where the store has it).
"""

from __future__ import annotations

import asyncio

import pytest

from ket.errors import JobRejected
from ket.store.contract import PacedStore, PushStore, QueueControl
from ket.tck.arrange import claim, claim_only, fresh_queue, insert_one, new_job, quiet, settle
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_paused_queue_has_nothing_due_for_pacing",
    "test_a_paused_queue_is_listed_with_who_paused_it_and_when",
    "test_a_paused_queue_s_jobs_are_claimed_by_no_replica_until_it_is_resumed",
    "test_a_resume_wakes_the_queue_s_waiters",
    "test_other_queues_are_claimed_while_one_is_paused",
    "test_pausing_a_paused_queue_changes_nothing_and_keeps_the_first_pause",
    "test_queue_control_refuses_an_empty_queue_and_an_empty_operator",
    "test_running_attempts_of_a_paused_queue_finish",
]

OPERATOR = "alice@ops"
WAIT = 10.0  # seconds: a wake-up the kit waits for comes well before


def _control(t: Tck) -> QueueControl:
    return t.require(QueueControl)  # type: ignore[type-abstract]


@tck_test
async def test_a_paused_queue_s_jobs_are_claimed_by_no_replica_until_it_is_resumed(
    t: Tck,
) -> None:
    control = _control(t)
    queue = fresh_queue("paused")
    replica = await t.replica()
    job_id = await insert_one(t.store, new_job(queue=queue))
    assert await control.queue_pause(queue, paused_by=OPERATOR) is True
    assert await claim(t.store, queue) == []
    assert await claim(replica, queue) == []
    later = await insert_one(t.store, new_job(queue=queue))  # enqueues go on: the job waits
    assert await claim(replica, queue) == []
    assert await control.queue_resume(queue) is True
    claimed = await claim(replica, queue)
    assert sorted(c.id for c in claimed) == [job_id, later]


@tck_test
async def test_other_queues_are_claimed_while_one_is_paused(t: Tck) -> None:
    control = _control(t)
    paused, other = fresh_queue("paused"), fresh_queue("other")
    await insert_one(t.store, new_job(queue=paused))
    job_id = await insert_one(t.store, new_job(queue=other))
    await control.queue_pause(paused, paused_by=OPERATOR)
    await claim_only(t.store, job_id, other)


@tck_test
async def test_running_attempts_of_a_paused_queue_finish(t: Tck) -> None:

    control = _control(t)
    queue = fresh_queue("running")
    job_id = await insert_one(t.store, new_job(queue=queue))
    running = await claim_only(t.store, job_id, queue)
    await control.queue_pause(queue, paused_by=OPERATOR)
    await settle(t.store, running, "completed")  # applied, or it fails here


@tck_test
async def test_pausing_a_paused_queue_changes_nothing_and_keeps_the_first_pause(t: Tck) -> None:
    control = _control(t)
    queue = fresh_queue("twice")
    assert await control.queue_pause(queue, paused_by=OPERATOR) is True
    first = (await control.queue_pauses())[queue]
    t.clock.advance(seconds=60)
    assert await control.queue_pause(queue, paused_by="bob@ops") is False
    assert (await control.queue_pauses())[queue] == first
    assert await control.queue_resume(queue) is True
    assert await control.queue_resume(queue) is False  # a queue not paused: nothing to resume
    assert queue not in await control.queue_pauses()


@tck_test
async def test_a_paused_queue_is_listed_with_who_paused_it_and_when(t: Tck) -> None:
    control = _control(t)
    queue = fresh_queue("listed")
    before = await t.store.now()
    await control.queue_pause(queue, paused_by=OPERATOR)
    pause = (await control.queue_pauses())[queue]
    assert pause.queue == queue
    assert pause.paused_by == OPERATOR
    assert abs((pause.paused_at - before).total_seconds()) < 5.0
    replica = await t.replica()
    assert isinstance(replica, QueueControl), "a replica lacks the capability its store has"
    assert (await replica.queue_pauses())[queue] == pause  # every replica sees the pause


@tck_test
async def test_a_resume_wakes_the_queue_s_waiters(t: Tck) -> None:
    control = _control(t)
    push = t.require(PushStore)  # type: ignore[type-abstract]
    queue = fresh_queue("woken")
    await control.queue_pause(queue, paused_by=OPERATOR)
    await insert_one(t.store, new_job(queue=queue))
    await quiet(push, [queue])
    waiting = asyncio.ensure_future(push.wait_for_jobs([queue], WAIT))
    await asyncio.sleep(0.05)
    assert await control.queue_resume(queue) is True
    assert await waiting is True


@tck_test
async def test_a_paused_queue_has_nothing_due_for_pacing(t: Tck) -> None:
    control = _control(t)
    paced = t.require(PacedStore)  # type: ignore[type-abstract]
    queue = fresh_queue("pacing")
    await insert_one(t.store, new_job(queue=queue))
    await control.queue_pause(queue, paused_by=OPERATOR)
    # the safety visit's question: nothing to wake it for (its loop would claim in vain)
    looked = await paced.look([queue])
    assert queue not in looked.due, looked
    await control.queue_resume(queue)
    assert (await paced.look([queue])).due.get(queue) == 0.0


@tck_test
async def test_queue_control_refuses_an_empty_queue_and_an_empty_operator(t: Tck) -> None:
    control = _control(t)
    with pytest.raises(JobRejected, match="queue"):
        await control.queue_pause("", paused_by=OPERATOR)
    with pytest.raises(JobRejected, match="who pauses a queue"):
        await control.queue_pause("mail", paused_by="")
    with pytest.raises(JobRejected, match="queue"):
        await control.queue_resume("a\x00b")
    assert await control.queue_pauses() == {}
