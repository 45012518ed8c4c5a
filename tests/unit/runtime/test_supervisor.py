"""The supervisor: rate-limited failure logs, services that go on after failures and hangs,
loops restarted when they end, and a backoff that doubles up to a cap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from ket.errors import NoRoom, StoreError
from ket.runtime import supervisor
from ket.runtime.flag import Flag
from ket.runtime.supervisor import MAX_BACKOFF_SECONDS, Repeats, Supervisor, backoff

LOGGER = "ket.worker"


class ManualClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    return caplog


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def fail(repeats: Repeats, where: str, error: Exception) -> bool:
    """Report `error` as the supervisor does: while handling it."""
    try:
        raise error
    except Exception as caught:
        return repeats.failure(where, caught)


# -- Repeats ---------------------------------------------------------------------------------


def test_the_first_failure_is_logged_with_the_service_name(
    logs: pytest.LogCaptureFixture,
) -> None:
    repeats = Repeats(clock=ManualClock())
    assert fail(repeats, "heartbeat (tenant acme)", StoreError("database away")) is True
    assert lines(logs) == ["heartbeat (tenant acme) failed: database away"]
    assert logs.records[0].levelno == logging.ERROR


def test_a_server_without_room_for_a_connection_is_a_warning_not_an_error(
    logs: pytest.LogCaptureFixture,
) -> None:
    # the registry refused by a full server (another client took max_connections): nothing of
    # ket's failed, and the operator's ERROR alerts should not fire for it
    repeats = Repeats(clock=ManualClock())
    refused = NoRoom(
        "cannot open the tenant registry at 'postgresql://ket@db/ket_registry': FATAL:  "
        "remaining connection slots are reserved for non-replication superuser connections"
    )
    assert fail(repeats, "worker presence", refused) is True
    assert fail(repeats, "tenant refresh", StoreError("database away")) is True
    assert [(r.levelno, r.getMessage()[:31]) for r in logs.records] == [
        (logging.WARNING, "worker presence failed: cannot "),
        (logging.ERROR, "tenant refresh failed: database"),
    ]


def test_the_same_failure_again_within_the_window_is_not_logged(
    logs: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    repeats = Repeats(clock=clock)
    fail(repeats, "heartbeat", StoreError("database away"))
    clock.now += 59
    assert fail(repeats, "heartbeat", StoreError("database away")) is False
    assert fail(repeats, "heartbeat", StoreError("database away")) is False
    assert lines(logs) == ["heartbeat failed: database away"]


def test_after_the_window_a_summary_of_the_suppressed_ones_is_logged(
    logs: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    repeats = Repeats(clock=clock)
    for _ in range(3):
        fail(repeats, "rescue", StoreError("database away"))
    clock.now += 61
    assert fail(repeats, "rescue", StoreError("database away")) is True
    assert lines(logs) == [
        "rescue failed: database away",
        "rescue failed 2 more times in the last minute",
        "rescue failed: database away",
    ]


def test_the_summary_of_one_suppressed_failure_is_singular(
    logs: pytest.LogCaptureFixture,
) -> None:
    clock = ManualClock()
    repeats = Repeats(clock=clock)
    fail(repeats, "rescue", StoreError("database away"))
    fail(repeats, "rescue", StoreError("database away"))
    clock.now += 61
    fail(repeats, "rescue", StoreError("database away"))
    assert "rescue failed 1 more time in the last minute" in lines(logs)


def test_recovered_logs_works_again_once_with_the_suppressed_ones(
    logs: pytest.LogCaptureFixture,
) -> None:
    repeats = Repeats(clock=ManualClock())
    for _ in range(4):
        fail(repeats, "prune", StoreError("database away"))
    repeats.recovered("prune")
    repeats.recovered("prune")
    assert lines(logs) == [
        "prune failed: database away",
        "prune failed 3 more times in the last minute",
        "prune works again",
    ]


def test_recovered_without_a_failure_logs_nothing(logs: pytest.LogCaptureFixture) -> None:
    repeats = Repeats(clock=ManualClock())
    fail(repeats, "prune", StoreError("database away"))
    repeats.recovered("rescue")
    assert lines(logs) == ["prune failed: database away"]


def test_after_recovering_the_same_failure_is_logged_again_at_once(
    logs: pytest.LogCaptureFixture,
) -> None:
    repeats = Repeats(clock=ManualClock())
    fail(repeats, "sweep", StoreError("database away"))
    repeats.recovered("sweep")
    assert fail(repeats, "sweep", StoreError("database away")) is True
    assert lines(logs)[-1] == "sweep failed: database away"


def test_a_different_error_is_logged_at_once(logs: pytest.LogCaptureFixture) -> None:
    repeats = Repeats(clock=ManualClock())
    fail(repeats, "sweep", StoreError("database away"))
    assert fail(repeats, "sweep", StoreError("disk full")) is True
    assert fail(repeats, "sweep", RuntimeError("database away")) is True
    assert fail(repeats, "prune", StoreError("database away")) is True
    assert lines(logs) == [
        "sweep failed: database away",
        "sweep failed: disk full",
        "sweep failed: database away",
        "prune failed: database away",
    ]


def test_a_ket_error_is_logged_without_a_traceback(logs: pytest.LogCaptureFixture) -> None:
    fail(Repeats(clock=ManualClock()), "sweep", StoreError("database away"))
    [record] = logs.records
    assert not record.exc_info
    assert "Traceback" not in logs.text


def test_another_exception_is_logged_with_its_traceback(logs: pytest.LogCaptureFixture) -> None:
    error = KeyError("a bug")
    fail(Repeats(clock=ManualClock()), "sweep", error)
    [record] = logs.records
    assert record.exc_info is not None and record.exc_info[1] is error
    assert "Traceback" in logs.text


def test_an_exception_reported_outside_its_except_block_keeps_its_traceback(
    logs: pytest.LogCaptureFixture,
) -> None:
    error = fail_later()
    Repeats(clock=ManualClock()).failure("wake-ups of queue default", error)
    [record] = logs.records
    assert record.exc_info is not None and record.exc_info[1] is error


def fail_later() -> Exception:
    try:
        raise KeyError("a bug in a wake-up")
    except KeyError as error:
        return error


def test_a_message_that_cannot_be_read_is_logged_by_its_type(
    logs: pytest.LogCaptureFixture,
) -> None:
    class Unreadable(StoreError):
        def __str__(self) -> str:
            raise RuntimeError("no")

    fail(Repeats(clock=ManualClock()), "sweep", Unreadable())
    assert lines(logs) == ["sweep failed: Unreadable"]


# -- Supervisor ------------------------------------------------------------------------------


class Service:
    """A service whose tick runs `body(count)`; counts its ticks."""

    def __init__(
        self, name: str, body: Callable[[int], Awaitable[None]], interval: float = 0.001
    ) -> None:
        self.name = name
        self.interval = interval
        self.ticks = 0
        self._body = body

    async def tick(self) -> None:
        self.ticks += 1
        await self._body(self.ticks)


def run(scenario: Callable[[Supervisor], Awaitable[None]]) -> None:
    async def main() -> None:
        sup = Supervisor(tenant="acme", stopping=Flag())
        try:
            await scenario(sup)
        finally:
            await sup.stop()

    asyncio.run(main())


@pytest.fixture
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Restarts and backoffs after a millisecond, so loop tests take no real waiting."""
    monkeypatch.setattr(supervisor, "backoff", lambda interval, failures, **ceiling: 0.001)


def test_where_names_the_service_and_tenant() -> None:
    stopping = Flag()
    assert Supervisor(tenant="acme", stopping=stopping).where("rescue") == "rescue (tenant acme)"
    assert Supervisor(tenant=None, stopping=stopping).where("tenant refresh") == "tenant refresh"


class Due(Service):
    """A service whose tick says it is due again after `due` seconds."""

    def __init__(self, due: float) -> None:
        super().__init__("sweep", self._nothing, interval=3_600.0)
        self.due = due

    async def _nothing(self, count: int) -> None:
        return None

    async def tick(self) -> float | None:  # type: ignore[override]
        await super().tick()
        return self.due


def test_a_service_whose_tick_says_when_it_is_due_is_ticked_then_not_after_its_interval() -> None:
    service = Due(0.005)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True)
        await asyncio.sleep(0.2)

    run(scenario)
    assert service.ticks > 5  # an hour's interval would have allowed one


def test_a_gated_service_ticks_only_while_its_gate_is_open_and_holds_no_task_while_shut() -> None:
    async def nothing(count: int) -> None:
        return None

    service = Service("heartbeat", nothing)
    gate = Flag()

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True, gate=gate)
        await asyncio.sleep(0.05)
        assert service.ticks == 0
        assert not sup._tasks  # a callback on the gate, not a task waiting for it
        gate.set()
        await asyncio.sleep(0.05)
        assert service.ticks > 3
        gate.clear()
        await asyncio.sleep(0.01)
        closed_at = service.ticks
        await asyncio.sleep(0.05)
        assert service.ticks == closed_at
        assert not sup._tasks
        gate.set()  # opened again: ticking again
        await asyncio.sleep(0.05)
        assert service.ticks > closed_at + 3

    run(scenario)


def test_a_gated_service_that_failed_says_it_works_again_after_its_gate_was_shut(
    logs: pytest.LogCaptureFixture, quick_restarts: None
) -> None:
    gate = Flag()

    async def failing_once(count: int) -> None:
        if count == 1:
            gate.clear()  # the last attempt ended meanwhile
            raise StoreError("database away")

    service = Service("heartbeat", failing_once)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, gate=gate)
        gate.set()
        await asyncio.sleep(0.05)
        assert service.ticks == 1 and not sup._tasks
        gate.set()
        await asyncio.sleep(0.05)

    run(scenario)
    assert service.ticks > 1
    assert lines(logs) == [
        "heartbeat (tenant acme) failed: database away",
        "heartbeat (tenant acme) works again",
    ]


def test_a_stopped_supervisor_ticks_no_gated_service_when_its_gate_opens() -> None:
    async def nothing(count: int) -> None:
        return None

    service = Service("heartbeat", nothing)
    gate = Flag()

    async def main() -> None:
        sup = Supervisor(tenant="acme", stopping=Flag())
        sup.every(service, gate=gate)
        await sup.stop()
        gate.set()
        await asyncio.sleep(0.05)
        assert service.ticks == 0 and not sup._tasks

    asyncio.run(main())


def test_a_sleep_ends_at_the_stop_signal_and_leaves_no_callback_behind() -> None:
    async def main() -> None:
        stopping = Flag()
        sup = Supervisor(tenant="acme", stopping=stopping)
        loop = asyncio.get_running_loop()
        began = loop.time()
        await sup.sleep(0.01)  # the timer ends it
        assert stopping._watchers == []  # its wake-up at the stop was forgotten
        sleeping = asyncio.ensure_future(sup.sleep(3_600))
        await asyncio.sleep(0.01)
        stopping.set()
        await asyncio.wait_for(sleeping, 1.0)
        assert loop.time() - began < 1.0

    asyncio.run(main())


def test_a_service_whose_tick_raises_keeps_being_ticked_and_is_logged_once(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def broken(count: int) -> None:
        raise StoreError("database away")

    service = Service("rescue", broken)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True)
        await asyncio.sleep(0.1)

    run(scenario)
    assert service.ticks > 1
    assert lines(logs) == ["rescue (tenant acme) failed: database away"]


def test_each_distinct_failure_of_a_service_is_logged_once(
    logs: pytest.LogCaptureFixture, quick_restarts: None
) -> None:
    async def alternating(count: int) -> None:
        raise StoreError(f"failure {count % 2}")

    service = Service("sweep", alternating)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True)
        await asyncio.sleep(0.1)

    run(scenario)
    assert service.ticks > 4
    assert sorted(lines(logs)) == [
        "sweep (tenant acme) failed: failure 0",
        "sweep (tenant acme) failed: failure 1",
    ]


def test_a_service_that_works_again_is_logged_as_recovered(
    logs: pytest.LogCaptureFixture, quick_restarts: None
) -> None:
    async def fails_twice(count: int) -> None:
        if count <= 2:
            raise StoreError("database away")

    service = Service("prune", fails_twice)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True)
        await asyncio.sleep(0.05)

    run(scenario)
    assert service.ticks > 3
    assert lines(logs) == [
        "prune (tenant acme) failed: database away",
        "prune (tenant acme) failed 1 more time in the last minute",
        "prune (tenant acme) works again",
    ]


def test_a_tick_that_hangs_is_abandoned_after_the_timeout_and_the_next_one_runs(
    logs: pytest.LogCaptureFixture,
) -> None:
    abandoned: list[str] = []

    async def hangs_once(count: int) -> None:
        if count == 1:
            try:
                await asyncio.Event().wait()  # a half-open connection
            except asyncio.CancelledError:
                abandoned.append("cancelled")
                raise

    service = Service("heartbeat", hangs_once)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True, timeout=0.05)
        await asyncio.sleep(0.15)

    run(scenario)
    assert service.ticks > 1
    assert abandoned == ["cancelled"]
    hung = [r for r in logs.records if "did not finish within" in r.getMessage()]
    assert [r.getMessage() for r in hung] == [
        "heartbeat (tenant acme) failed: heartbeat did not finish within 0.05s; abandoned it"
    ]
    assert not hung[0].exc_info  # a hang is not a bug in ket: no traceback


def test_a_tick_that_ignores_its_cancellation_does_not_hold_up_the_service(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def stuck(count: int) -> None:
        if count == 1:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(0.3)  # a driver call that takes its time to cancel
                raise

    service = Service("rescue", stuck)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True, timeout=0.02)
        await asyncio.sleep(0.1)

    run(scenario)
    assert service.ticks > 1


def test_a_kept_loop_that_returns_is_logged_and_restarted(
    logs: pytest.LogCaptureFixture, quick_restarts: None
) -> None:
    runs: list[int] = []

    async def returns() -> None:
        runs.append(1)

    async def scenario(sup: Supervisor) -> None:
        sup.keep("settler", returns)
        await asyncio.sleep(0.05)

    run(scenario)
    assert len(runs) > 1
    assert lines(logs)[0] == "settler (tenant acme) ended unexpectedly; restarting it"


def test_a_kept_loop_that_raises_is_logged_once_and_restarted(
    logs: pytest.LogCaptureFixture, quick_restarts: None
) -> None:
    runs: list[int] = []

    async def raises() -> None:
        runs.append(1)
        raise RuntimeError("claim loop bug")

    async def scenario(sup: Supervisor) -> None:
        sup.keep("claim loop of queue default", raises)
        await asyncio.sleep(0.05)

    run(scenario)
    assert len(runs) > 1
    assert lines(logs) == ["claim loop of queue default (tenant acme) failed: claim loop bug"]


def test_a_kept_loop_is_restarted_after_a_backoff_not_at_once(
    logs: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    async def returns() -> None:
        runs.append(1)

    async def scenario(sup: Supervisor) -> None:
        sup.keep("settler", returns)
        await asyncio.sleep(0.1)  # the first restart waits 0.5 to 1 s

    run(scenario)
    assert runs == [1]


def test_a_one_off_step_runs_once_and_ends_quietly(logs: pytest.LogCaptureFixture) -> None:
    runs: list[int] = []
    failures: list[Exception] = []

    async def step() -> None:
        runs.append(1)

    async def scenario(sup: Supervisor) -> None:
        sup.once("burst start", step, timeout=1.0, failed=failures.append)
        await asyncio.sleep(0.05)

    run(scenario)
    assert (runs, failures, lines(logs)) == ([1], [], [])


def test_a_one_off_step_that_fails_or_hangs_is_logged_and_handed_to_its_owner(
    logs: pytest.LogCaptureFixture,
) -> None:
    failures: list[Exception] = []

    async def raises() -> None:
        raise StoreError("database error: no such table: ket_jobs")

    async def hangs() -> None:
        await asyncio.sleep(30)

    async def scenario(sup: Supervisor) -> None:
        sup.once("burst start", raises, timeout=1.0, failed=failures.append)
        sup.once("other start", hangs, timeout=0.02, failed=failures.append)
        await asyncio.sleep(0.1)

    run(scenario)
    assert [type(error).__name__ for error in failures] == ["StoreError", "TickTimeout"]
    assert lines(logs) == [
        "burst start (tenant acme) failed: database error: no such table: ket_jobs",
        "other start (tenant acme) failed: other start did not finish within 0.02s; abandoned it",
    ]


def test_stop_ends_every_service_and_loop(logs: pytest.LogCaptureFixture) -> None:
    async def works(count: int) -> None:
        pass

    service = Service("sweep", works)
    runs: list[str] = []

    async def forever() -> None:
        runs.append("started")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            runs.append("cancelled")
            raise

    async def main() -> None:
        stopping = Flag()
        sup = Supervisor(tenant="acme", stopping=stopping)
        sup.every(service, at_once=True)
        sup.keep("settler", forever)
        await asyncio.sleep(0.05)
        await sup.stop()
        assert stopping.is_set()
        ticks = service.ticks
        await asyncio.sleep(0.05)
        assert service.ticks == ticks > 0
        assert runs == ["started", "cancelled"]

    asyncio.run(main())
    assert not [r for r in logs.records if r.levelno >= logging.ERROR]


def test_stop_cancels_a_tick_in_flight() -> None:
    state: list[str] = []

    async def slow(count: int) -> None:
        state.append("ticking")
        try:
            await asyncio.Event().wait()
        finally:
            state.append("ended")

    service = Service("prune", slow)

    async def main() -> None:
        sup = Supervisor(tenant="acme", stopping=Flag())
        sup.every(service, at_once=True, timeout=60.0)
        await asyncio.sleep(0.02)
        await sup.stop()
        await asyncio.sleep(0.02)
        assert state == ["ticking", "ended"]

    asyncio.run(main())


def test_stop_leaves_behind_a_loop_that_does_not_end_when_cancelled_and_names_it(
    logs: pytest.LogCaptureFixture,
) -> None:
    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(5)  # a driver call that ignores the cancel for long

    async def main() -> float:
        sup = Supervisor(tenant="acme", stopping=Flag())
        sup.keep("claim loop", stubborn)
        await asyncio.sleep(0.02)
        began = asyncio.get_running_loop().time()
        await sup.stop(wait=0.1)
        return asyncio.get_running_loop().time() - began

    took = asyncio.run(main())
    assert took < 1.0
    assert lines(logs) == [
        "claim loop (tenant acme) did not stop within 0.1 s of being cancelled; "
        "the worker stops without it"
    ]


def test_sleep_wakes_early_when_the_worker_stops() -> None:
    async def main() -> float:
        stopping = Flag()
        sup = Supervisor(tenant=None, stopping=stopping)
        loop = asyncio.get_running_loop()
        loop.call_later(0.02, stopping.set)
        started = loop.time()
        await sup.sleep(30)
        return loop.time() - started

    assert asyncio.run(main()) < 1


def test_a_service_failing_over_a_thousand_times_in_a_row_keeps_being_ticked(
    monkeypatch: pytest.MonkeyPatch, logs: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(supervisor, "MAX_BACKOFF_SECONDS", 0.0)  # no real waiting

    async def broken(count: int) -> None:
        raise StoreError("database away")

    service = Service("heartbeat", broken, interval=0.0)

    async def scenario(sup: Supervisor) -> None:
        sup.every(service, at_once=True)
        for _ in range(3_000):  # 30 s at most
            if service.ticks >= 1_100:
                break
            await asyncio.sleep(0.01)

    run(scenario)
    assert service.ticks >= 1_100
    assert not [r for r in logs.records if r.levelno == logging.CRITICAL]


# -- backoff ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("interval", "failures", "top"),
    [(1.0, 1, 1.0), (1.0, 2, 2.0), (1.0, 3, 4.0), (1.0, 5, 16.0), (1.0, 6, 30.0), (0.2, 3, 0.8)],
)
def test_backoff_doubles_from_the_interval_up_to_the_cap(
    monkeypatch: pytest.MonkeyPatch, interval: float, failures: int, top: float
) -> None:
    monkeypatch.setattr("ket.runtime.supervisor.random.uniform", lambda low, high: high)
    assert backoff(interval, failures) == top
    monkeypatch.setattr("ket.runtime.supervisor.random.uniform", lambda low, high: low)
    assert backoff(interval, failures) == top / 2


def test_backoff_is_capped_at_the_maximum_after_many_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ket.runtime.supervisor.random.uniform", lambda low, high: high)
    assert backoff(1.0, 20) == MAX_BACKOFF_SECONDS
    assert backoff(0.001, 1_000) == MAX_BACKOFF_SECONDS


def test_backoff_of_a_service_slower_than_the_cap_starts_at_its_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("ket.runtime.supervisor.random.uniform", lambda low, high: high)
    assert backoff(300.0, 1) == 300.0
    assert backoff(300.0, 4) == 300.0


def test_backoff_jitter_stays_within_half_to_all_of_the_value() -> None:
    delays = [backoff(4.0, 2) for _ in range(2_000)]
    assert all(4.0 <= delay <= 8.0 for delay in delays)
    assert min(delays) < 4.5 and max(delays) > 7.5  # it does spread


def test_services_started_together_at_once_within_a_spread_tick_first_at_spread_moments() -> None:
    """A thousand tenants starting together: their first visits come within the spread, not
    all at the same instant, and none much later than it."""
    firsts: list[float] = []

    async def scenario(sup: Supervisor) -> None:
        loop = asyncio.get_running_loop()
        began = loop.time()

        async def first(count: int) -> None:
            if count == 1:
                firsts.append(loop.time() - began)

        for n in range(40):
            sup.every(
                Service(f"visit {n}", first, interval=3_600.0), at_once=True, first_within=0.3
            )
        async with asyncio.timeout(5):
            while len(firsts) < 40:
                await asyncio.sleep(0.05)

    run(scenario)
    assert max(firsts) <= 0.3 + 0.3  # the spread, and a busy machine's slack
    assert sum(1 for t in firsts if t < 0.05) < 20  # spread out, not all at once
    assert max(firsts) - min(firsts) > 0.15


def test_backoff_stops_at_a_service_s_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ket.runtime.supervisor.random.uniform", lambda low, high: high)
    # the heartbeat (a 10 s interval) retries every interval, never 30 s late
    assert backoff(10.0, 20, ceiling=10.0) == 10.0
    assert backoff(0.2, 20, ceiling=1.0) == 1.0  # the settler's retries
    assert backoff(0.2, 2, ceiling=1.0) == 0.4
