"""The tenants that may hold leases at once (runtime/admission.py), and a tenant's place among
them as its attempts and claims come and go (runtime/lease.py's Attempts)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from ket.runtime import admission as admission_module
from ket.runtime.admission import Admission
from ket.runtime.lease import Attempts
from ket.store.types import ClaimedJob

AT = datetime(2026, 3, 1, tzinfo=UTC)


def _job(job_id: int) -> ClaimedJob:
    return ClaimedJob(
        id=job_id,
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


def _run(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """The async test on an event loop of its own."""

    @functools.wraps(test)
    def run(*args: object, **kwargs: object) -> None:
        asyncio.run(test(*args, **kwargs))  # type: ignore[arg-type]

    return run


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@_run
async def test_tenants_beyond_the_places_wait_and_come_in_the_order_they_asked() -> None:
    gate = Admission(floor=lambda: 2)
    await gate.enter()
    await gate.enter()
    order: list[str] = []

    async def enter(name: str) -> None:
        await gate.enter()
        order.append(name)

    waiting = [asyncio.ensure_future(enter(name)) for name in ("c", "d")]
    await _settle()
    assert (gate.holding, gate.waiting, order) == (2, 2, [])
    gate.leave(done=False)  # stopped: its place goes to the first that waits, no more
    await _settle()
    assert (gate.holding, order) == (2, ["c"])
    gate.leave(done=False)
    await _settle()
    assert order == ["c", "d"]
    await asyncio.gather(*waiting)


@_run
async def test_one_tenant_is_always_admitted_whatever_the_estimate() -> None:
    gate = Admission(floor=lambda: 0)
    await asyncio.wait_for(gate.enter(), 1)
    assert gate.holding == 1


@_run
async def test_a_tenant_that_gives_up_waiting_leaves_no_place_taken() -> None:
    gate = Admission(floor=lambda: 1)
    await gate.enter()
    waiting = asyncio.ensure_future(gate.enter())
    await _settle()
    waiting.cancel()
    await _settle()
    gate.leave()
    assert (gate.holding, gate.waiting) == (0, 0)
    await gate.enter()  # at once: nothing was left behind
    assert gate.holding == 1


@_run
async def test_waiting_tenants_come_in_when_the_floor_grows() -> None:
    lanes = [1]
    gate = Admission(floor=lambda: lanes[0])
    await gate.enter()
    waiting = asyncio.ensure_future(gate.enter())
    await _settle()
    assert not waiting.done()
    lanes[0] = 3  # engines gave connections back: looked at again within RECHECK_SECONDS
    await asyncio.wait_for(waiting, admission_module.RECHECK_SECONDS * 4)
    assert gate.holding == 2


@_run
async def test_places_grow_with_work_done_and_halve_when_a_renewal_is_late() -> None:
    now = [0.0]
    gate = Admission(floor=lambda: 2, clock=lambda: now[0])
    for _ in range(2):
        await gate.enter()
    waiting = [asyncio.ensure_future(gate.enter()) for _ in range(20)]
    await _settle()
    for _ in range(6):  # each tenant done while others wait: one more place
        gate.leave()
        await _settle()
    assert (gate.places, gate.holding) == (8, 8)
    gate.heard(1.0, every=10.0)  # prompt: nothing changes
    assert gate.places == 8
    gate.heard(admission_module.LATE_SHARE * 10.0, every=10.0)
    assert gate.places == 4  # half of those holding
    for _ in range(4):  # from then on, a share of one place for each tenant done
        gate.leave()
        await _settle()
    assert (gate.places, gate.holding) == (5, 5)  # 4 + 4 x 1/4
    gate.heard(9.0, every=10.0)  # within the same interval: halved once only
    assert gate.places == 5
    for _ in range(5):
        gate.leave()
        await _settle()
    assert (gate.places, gate.holding) == (6, 6)  # one more per round of places done
    now[0] = 10.0
    gate.heard(9.0, every=10.0)
    assert gate.places == 3
    now[0] = 20.0
    gate.heard(9.0, every=10.0)
    assert gate.places == 3  # 6 still hold: half of them
    for future in waiting:
        future.cancel()
    await _settle()


@_run
async def test_a_tenant_stopped_makes_no_room_for_more() -> None:
    gate = Admission(floor=lambda: 1)
    await gate.enter()
    waiting = asyncio.ensure_future(gate.enter())
    await _settle()
    gate.leave(done=False)
    await asyncio.wait_for(waiting, 1)
    assert (gate.places, gate.holding) == (1, 1)


@_run
async def test_the_wait_is_said_once_a_minute_with_the_numbers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = Admission(floor=lambda: 1, where=" on db:5432")
    await gate.enter()
    with caplog.at_level(logging.WARNING, logger="ket.worker"):
        waiting = [asyncio.ensure_future(gate.enter()) for _ in range(3)]
        await _settle()
    lines = [r.getMessage() for r in caplog.records if "wait their turn" in r.getMessage()]
    assert len(lines) == 1
    assert "1 tenant(s) hold running work" in lines[0] and "db:5432" in lines[0]
    with caplog.at_level(logging.WARNING, logger="ket.worker"):
        gate.heard(3.0, every=1.0)
        gate.heard(3.0, every=1.0)
    late = [r.getMessage() for r in caplog.records if "renewing leases took" in r.getMessage()]
    assert late == [
        "renewing leases took 3.0 s of the 1.0 s between renewals, with 1 tenant(s) holding "
        "running work on the connection budget on db:5432: admitting 1 at once until renewals "
        "are prompt again"
    ]
    for future in waiting:
        future.cancel()
    await _settle()


@_run
async def test_a_tenant_keeps_its_place_until_its_attempts_are_recorded() -> None:
    gate = Admission(floor=lambda: 1)
    first = Attempts(lease_seconds=30, admission=gate)
    second = Attempts(lease_seconds=30, admission=gate)
    assert not first.may_claim()
    await first.admit()
    first.add(_job(1), sent=0.0)
    first.claimed()
    assert first.may_claim()  # a second claim while it holds its place: at once
    first.claimed()
    other = asyncio.ensure_future(second.admit())
    await _settle()
    assert not other.done()
    first.finish(1)  # over, its outcome not recorded: the lease (and the place) are kept
    await _settle()
    assert not other.done()
    first.settled(1)
    await asyncio.wait_for(other, 1)
    second.claimed()  # its claim found nothing: it leaves at once
    assert (gate.holding, second.admitted_at) == (0, None)


@_run
async def test_a_claim_that_finds_nothing_leaves_the_place() -> None:
    gate = Admission(floor=lambda: 1)
    attempts = Attempts(lease_seconds=30, admission=gate)
    await attempts.admit()
    assert gate.holding == 1
    attempts.claimed()
    assert gate.holding == 0


@_run
async def test_a_tenant_whose_turn_is_over_lets_its_work_end_and_queues_again() -> None:
    now = [0.0]
    gate = Admission(floor=lambda: 1, clock=lambda: now[0])
    busy, first, second = (
        Attempts(lease_seconds=30, admission=gate, clock=lambda: now[0]) for _ in range(3)
    )
    await busy.admit()
    busy.add(_job(1), sent=0.0)
    busy.claimed()
    waiting = [asyncio.ensure_future(a.admit()) for a in (first, second)]
    await _settle()
    assert busy.may_claim()  # others wait, but its turn is not over
    busy.claimed()
    now[0] = admission_module.TURN_SECONDS
    assert not busy.may_claim()  # over: no more claims
    again = asyncio.ensure_future(busy.admit())
    await _settle()
    assert not again.done() and not any(w.done() for w in waiting)  # its job still runs
    busy.remove(1)  # done: its place, and one more learnt, go to the two that waited
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert not again.done() and gate.holding == 2  # it queued again behind them
    first.claimed()
    await asyncio.wait_for(again, 1)
    busy.claimed()
    second.claimed()
    assert gate.holding == 0


@_run
async def test_a_stopped_tenant_gives_its_place_up() -> None:
    gate = Admission(floor=lambda: 1)
    attempts = Attempts(lease_seconds=30, admission=gate)
    await attempts.admit()
    attempts.add(_job(1), sent=0.0)
    attempts.claimed()
    attempts.leave()
    assert gate.holding == 0
    attempts.remove(1)  # its last attempt handed back later: nothing left twice
    assert gate.holding == 0
