"""An attempt's clock (runtime/watch.py): the timeout aborts the signal, and a wait for room for
a connection (store/waiting.py) stops it while it lasts."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from ket.context.signal import AbortSignal
from ket.runtime.watch import AttemptWatch
from ket.store.types import ClaimedJob
from ket.store.waiting import pause_attempt, timed_by, untimed

AT = datetime(2026, 3, 1, tzinfo=UTC)
JOB = ClaimedJob(
    id=1,
    name="t.work",
    queue="default",
    payload={},
    payload_version=1,
    priority=0,
    attempt=1,
    max_attempts=3,
    unique_key=None,
    company=None,
    run_at=AT,
    enqueued_at=AT,
    lease_until=AT,
    fence=1,
    tick=None,
    ticks_skipped=None,
)


def _watch(timeout: float) -> tuple[AttemptWatch, AbortSignal]:
    signal = AbortSignal()
    watch = AttemptWatch(
        asyncio.get_running_loop(), signal, timeout=timeout, grace=5, job=JOB, tenant="acme"
    )
    return watch, signal


def test_the_timeout_aborts_the_signal_when_nothing_waits() -> None:
    async def body() -> None:
        watch, signal = _watch(0.1)
        watch.start_clock()
        await asyncio.sleep(0.2)
        assert signal.reason == "timeout"
        watch.close()

    asyncio.run(body())


def test_a_wait_for_room_stops_the_clock_and_it_goes_on_with_what_was_left() -> None:
    async def body() -> None:
        watch, signal = _watch(0.3)
        watch.start_clock()
        await asyncio.sleep(0.1)
        token = timed_by(watch)
        first = pause_attempt()  # 0.5 s waiting for room: more than the timeout
        second = pause_attempt()  # an overlapping wait of the same attempt
        await asyncio.sleep(0.2)
        assert second is watch
        second.resume()
        await asyncio.sleep(0.3)
        assert first is watch
        first.resume()
        untimed(token)
        assert not signal.aborted
        await asyncio.sleep(0.1)  # 0.2 s of its own time now: 0.1 s left
        assert not signal.aborted
        await asyncio.sleep(0.2)
        assert signal.reason == "timeout"
        watch.close()

    asyncio.run(body())


def test_a_wait_outside_the_attempt_or_after_it_ended_starts_no_clock() -> None:
    async def body() -> None:
        watch, signal = _watch(0.1)
        watch.start_clock()
        assert pause_attempt() is None  # nobody's attempt: its clock runs on
        await asyncio.sleep(0.2)
        assert signal.reason == "timeout"
        watch.close()

        ended, signal = _watch(0.1)
        ended.start_clock()
        token = timed_by(ended)
        paused = pause_attempt()
        ended.close()  # the attempt ended while its handler waited
        assert paused is ended
        paused.resume()
        untimed(token)
        await asyncio.sleep(0.2)
        assert not signal.aborted

    asyncio.run(body())
