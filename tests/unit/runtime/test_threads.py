"""The plain handlers' threads (runtime/threads.py): made at need and let go when idle, and a
worker process's tenants taking turns at a bounded number of them."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import CancelledError, Future
from typing import Any

import pytest

from ket.runtime import threads as threads_module
from ket.runtime.threads import HandlerThreads


def test_a_tenants_plain_handler_threads_end_once_idle_and_come_back_when_needed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One thread per tenant kept after a single plain handler made a worker serving a thousand
    tenants of the example app 259 MB: the threads end once idle."""
    monkeypatch.setattr(threads_module, "THREADS_LINGER_SECONDS", 0.2)
    threads = threads_module.OnDemandThreads(max_workers=2, thread_name_prefix="ket-linger")

    def named() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("ket-linger")]

    async def body() -> tuple[int, list[str], int, list[str], int]:
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(threads, lambda: 41 + 1) == 42
        busy = threads.threads
        while_used = named()
        await asyncio.sleep(0.2 * 3)
        # the pool was let go: its thread ended
        for _ in range(50):
            if not named():
                break
            await asyncio.sleep(0.02)
        idle, gone = threads.threads, named()
        assert await loop.run_in_executor(threads, lambda: 7) == 7  # a new pool at need
        again = threads.threads
        threads.shutdown()
        return busy, while_used, idle, gone, again

    busy, while_used, idle, gone, again = asyncio.run(body())
    assert busy == 1 and len(while_used) == 1
    assert idle == 0 and gone == []
    assert again == 1


def test_no_more_calls_run_at_once_than_the_process_has_threads() -> None:
    """A thousand tenants' first plain handlers ran in 944 threads at once (220 MB kept)."""
    threads = HandlerThreads(3)
    running = 0
    most = 0
    lock = threading.Lock()

    def call() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    futures = [threads.submit(f"t{n % 10}", call) for n in range(40)]
    for future in futures:
        future.result(timeout=10)
    made = threads.threads
    threads.shutdown()
    assert most == 3
    assert made == 3  # the pool never made more threads than that


def test_a_free_thread_takes_the_next_tenants_call_not_the_busiest_tenants_next() -> None:
    threads = HandlerThreads(1)
    gate = threading.Event()
    order: list[str] = []
    first = threads.submit("busy", gate.wait)  # holds the one thread
    later = [threads.submit("busy", order.append, "busy") for _ in range(5)]
    later.append(threads.submit("quiet", order.append, "quiet"))
    later.append(threads.submit("other", order.append, "other"))
    gate.set()
    every: list[Future[Any]] = [first, *later]
    for future in every:
        future.result(timeout=10)
    threads.shutdown()
    # each tenant gets its turn: the calls queued after busy's five still run second and third
    assert order == ["busy", "quiet", "other", "busy", "busy", "busy", "busy"]


def test_a_call_that_waited_long_for_a_thread_is_said_once_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(threads_module, "WAIT_WARNING_SECONDS", 0.05)
    threads = HandlerThreads(1)
    futures = [threads.submit(f"t{n}", time.sleep, 0.1) for n in range(4)]
    with caplog.at_level(logging.WARNING, logger="ket.worker"):
        for future in futures:
            future.result(timeout=10)
    threads.shutdown()
    said = [r.getMessage() for r in caplog.records if "waited up to" in r.getMessage()]
    assert len(said) == 1  # once a minute at most
    assert "all 1 handler threads" in said[0] and "KET_HANDLER_THREADS" in said[0]


def test_a_failing_call_gives_its_thread_back_and_its_error_to_its_caller() -> None:
    threads = HandlerThreads(1)

    def fails() -> None:
        raise ValueError("bad order")

    failed = threads.submit("t1", fails)
    after = threads.submit("t2", lambda: 7)
    with pytest.raises(ValueError, match="bad order"):
        failed.result(timeout=10)
    assert after.result(timeout=10) == 7
    threads.shutdown()


def test_shutting_down_cancels_the_calls_still_waiting() -> None:
    threads = HandlerThreads(1)
    gate = threading.Event()
    running = threads.submit("t1", gate.wait)
    waiting = threads.submit("t2", lambda: 1)
    threads.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(timeout=10) is True
    with pytest.raises(CancelledError):
        waiting.result(timeout=10)


def test_a_pool_of_no_threads_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        HandlerThreads(0)


def test_calls_after_a_shutdown_fail_and_none_is_left_waiting() -> None:
    threads = HandlerThreads(1)
    gate = threading.Event()
    running = threads.submit("t1", gate.wait)
    waiting = [threads.submit(f"t{n}", lambda: 1) for n in (2, 3)]
    threads._pool.shutdown(wait=False)  # as at the process's end, calls still queued
    gate.set()
    assert running.result(timeout=10) is True
    for call in waiting:  # the pool's refusal, each, not a future that never ends
        with pytest.raises(RuntimeError):
            call.result(timeout=10)
    with pytest.raises(RuntimeError):
        threads.submit("t3", lambda: 2).result(timeout=10)
