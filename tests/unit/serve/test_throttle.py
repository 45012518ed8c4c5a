"""The per-client backoff after failed authentications (serve/throttle.py), on a clock the test
moves."""

from __future__ import annotations

import pytest

from ket.serve.refusal import Refusal
from ket.serve.throttle import FORGIVE_SECONDS, FREE_FAILURES, MAX_WAIT_SECONDS, Throttle


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _fail(throttle: Throttle, client: str, times: int) -> None:
    for _ in range(times):
        throttle.check(client)
        throttle.failed(client)


def test_a_client_waits_after_its_free_failures_twice_as_long_each_time() -> None:
    clock = Clock()
    throttle = Throttle(clock)
    _fail(throttle, "10.0.0.1", FREE_FAILURES)
    throttle.check("10.0.0.1")  # the free ones cost no wait
    throttle.failed("10.0.0.1")
    with pytest.raises(Refusal) as refused:
        throttle.check("10.0.0.1")
    assert refused.value.status == 429 and refused.value.headers["Retry-After"] == "1"
    throttle.check("10.0.0.2")  # another client is not held back
    clock.now += 1.0
    throttle.check("10.0.0.1")
    throttle.failed("10.0.0.1")  # the next failure: 2 s
    clock.now += 1.5
    with pytest.raises(Refusal):
        throttle.check("10.0.0.1")
    clock.now += 0.5
    throttle.check("10.0.0.1")


def test_the_wait_is_capped_and_a_success_or_a_quiet_while_forgets_the_failures() -> None:
    clock = Clock()
    throttle = Throttle(clock)
    for _ in range(FREE_FAILURES + 20):
        throttle.failed("10.0.0.1")
    with pytest.raises(Refusal) as refused:
        throttle.check("10.0.0.1")
    assert int(refused.value.headers["Retry-After"]) <= MAX_WAIT_SECONDS + 1
    clock.now += MAX_WAIT_SECONDS
    throttle.check("10.0.0.1")
    throttle.passed("10.0.0.1")  # signed in: starts again from nothing
    _fail(throttle, "10.0.0.1", FREE_FAILURES)
    throttle.check("10.0.0.1")
    for _ in range(FREE_FAILURES + 5):
        throttle.failed("10.0.0.3")
    clock.now += FORGIVE_SECONDS + 1
    _fail(throttle, "10.0.0.3", FREE_FAILURES)  # forgiven: free failures again
    throttle.check("10.0.0.3")
