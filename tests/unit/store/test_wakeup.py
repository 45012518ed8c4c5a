"""In-process wake-ups: who is woken, on which loop, and how soon."""

from __future__ import annotations

import asyncio
import threading

from ket.wakeup.local import Wakeups


def test_a_notify_on_the_waiters_own_loop_wakes_it_on_the_next_turn() -> None:
    async def scenario() -> bool:
        wakeups = Wakeups()
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], timeout=60))
        await asyncio.sleep(0)  # the waiter registers
        wakeups.notify(["mail"])
        await asyncio.sleep(0)  # one turn: no hop through the loop's self-pipe first
        return waiting.done() and waiting.result()

    assert asyncio.run(scenario()) is True


def test_a_notify_from_another_thread_wakes_the_waiter() -> None:
    async def scenario() -> bool:
        wakeups = Wakeups()
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], timeout=60))
        await asyncio.sleep(0)
        thread = threading.Thread(target=wakeups.notify, args=(["mail"],))
        thread.start()
        thread.join()
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(scenario()) is True


def test_a_notify_from_another_event_loop_wakes_the_waiter() -> None:
    wakeups = Wakeups()
    registered = threading.Event()

    async def other_loop() -> None:
        registered.wait(10)
        wakeups.notify(["mail"])  # a running loop, but not the waiter's

    async def scenario() -> bool:
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], timeout=60))
        await asyncio.sleep(0)
        registered.set()
        return await asyncio.wait_for(waiting, 10)

    thread = threading.Thread(target=asyncio.run, args=(other_loop(),))
    thread.start()
    try:
        assert asyncio.run(scenario()) is True
    finally:
        thread.join()


def test_a_wait_nobody_notifies_ends_false_after_its_timeout() -> None:
    assert asyncio.run(Wakeups().wait(["mail"], timeout=0.01)) is False


def test_a_notify_for_other_queues_leaves_the_waiter_waiting() -> None:
    async def scenario() -> bool:
        wakeups = Wakeups()
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], timeout=0.05))
        await asyncio.sleep(0)
        wakeups.notify(["default"])
        return await waiting

    assert asyncio.run(scenario()) is False


def test_notify_all_wakes_waiters_of_every_queue() -> None:
    async def scenario() -> list[bool]:
        wakeups = Wakeups()
        waits = [asyncio.ensure_future(wakeups.wait([q], timeout=60)) for q in ("a", "b")]
        await asyncio.sleep(0)
        wakeups.notify_all()
        return list(await asyncio.wait_for(asyncio.gather(*waits), 10))

    assert asyncio.run(scenario()) == [True, True]


def test_a_cancelled_wait_is_forgotten_and_later_notifies_are_harmless() -> None:
    async def scenario() -> bool:
        wakeups = Wakeups()
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], timeout=60))
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.wait([waiting])
        wakeups.notify(["mail"])  # nobody left to wake, and no error
        return await wakeups.wait(["mail"], timeout=0.01)

    assert asyncio.run(scenario()) is False


def test_a_prompt_notify_hurries_the_claims_of_its_queue_and_marks_the_next() -> None:
    """An application's hint: a claim of the queue that waits now is hurried, and the next
    claim of the queue knows it is for such a job (once)."""
    wakeups = Wakeups()
    hurried: list[str] = []
    with (
        wakeups.claiming("mail", lambda: hurried.append("mail")),
        wakeups.claiming("sms", lambda: hurried.append("sms")),
    ):
        wakeups.notify_prompt(["mail"])
    assert hurried == ["mail"]
    assert (wakeups.take_prompt("mail"), wakeups.take_prompt("mail")) == (True, False)
    assert not wakeups.take_prompt("sms")
    wakeups.notify_prompt(["mail"])  # no claim under way: only the mark
    assert hurried == ["mail"] and wakeups.take_prompt("mail")
