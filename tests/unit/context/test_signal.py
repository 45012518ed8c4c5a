"""The abort signal: aborted once, from any thread, the first reason winning; a plain handler's
sleep and an async handler's wait both end when it is aborted, whichever thread aborts it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ket.context import AbortSignal
from ket.context.signal import AbortReason
from ket.errors import Aborted

REASONS: list[AbortReason] = ["timeout", "shutdown", "cancelled", "lease lost"]


def test_a_new_signal_is_not_aborted_and_throws_nothing() -> None:
    signal = AbortSignal()
    assert (signal.aborted, signal.reason) == (False, None)
    signal.throw_if_aborted()
    assert signal.sleep(0.01) is False


def test_the_first_reason_wins_when_threads_abort_at_once() -> None:
    for _ in range(50):
        signal = AbortSignal()
        start = threading.Barrier(len(REASONS))

        def abort(
            reason: AbortReason, signal: AbortSignal = signal, start: Any = start
        ) -> tuple[AbortReason, bool]:
            start.wait()
            return reason, signal.abort(reason)

        with ThreadPoolExecutor(len(REASONS)) as pool:
            outcomes = list(pool.map(abort, REASONS))
        [winner] = [reason for reason, won in outcomes if won]
        assert signal.reason == winner
        with pytest.raises(Aborted) as raised:
            signal.throw_if_aborted()
        assert raised.value.reason == winner


def test_sleep_returns_true_as_soon_as_another_thread_aborts() -> None:
    signal = AbortSignal()
    asleep = threading.Event()

    def sleeper() -> bool:
        asleep.set()
        return signal.sleep(60)  # would return False only after a minute

    with ThreadPoolExecutor(1) as pool:
        slept = pool.submit(sleeper)
        asleep.wait(5)
        signal.abort("cancelled")
        assert slept.result(timeout=10) is True


def test_sleep_after_the_abort_returns_true_at_once() -> None:
    signal = AbortSignal()
    signal.abort("timeout")
    assert signal.sleep(60) is True


def test_wait_on_the_loop_ends_when_a_thread_aborts_and_returns_the_reason() -> None:
    async def main() -> Any:
        signal = AbortSignal()
        waiting = asyncio.ensure_future(signal.wait())
        await asyncio.sleep(0.01)
        assert not waiting.done()
        threading.Thread(target=signal.abort, args=("lease lost",)).start()
        return await asyncio.wait_for(waiting, 10)

    assert asyncio.run(main()) == "lease lost"


def test_wait_after_the_abort_returns_the_reason_at_once() -> None:
    async def main() -> Any:
        signal = AbortSignal()
        signal.abort("shutdown")
        return await signal.wait()

    assert asyncio.run(main()) == "shutdown"


def test_every_waiter_of_every_loop_is_woken() -> None:
    signal = AbortSignal()
    waiting = threading.Barrier(4)
    results: list[str] = []

    def loop_waiting() -> None:
        async def main() -> None:
            waiter = asyncio.ensure_future(signal.wait())
            await asyncio.sleep(0)  # the waiter has started waiting
            waiting.wait()
            results.append(await asyncio.wait_for(waiter, 10))

        asyncio.run(main())

    threads = [threading.Thread(target=loop_waiting) for _ in range(3)]
    for thread in threads:
        thread.start()
    waiting.wait(10)
    signal.abort("timeout")
    for thread in threads:
        thread.join(10)
    assert results == ["timeout"] * 3
