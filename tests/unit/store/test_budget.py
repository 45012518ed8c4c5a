"""The process's connection budget: never more open than the limit, idle connections given up
to callers that need the room and closed after the idle time, waits that end without failing,
and one log line for a spent budget, not one per wait."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from ket.connection import budget as ket_budget
from ket.connection.budget import RESERVED, ConnectionBudget
from ket.errors import StoreError


class Connection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class Recorder(logging.Handler):
    """Keeps every record it is handed."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class Pool:
    """A holder as a lane is: connections it keeps idle, which the budget may ask it to close."""

    def __init__(self, budget: ConnectionBudget, kind: str = "lane") -> None:
        self.budget = budget
        self.kind = kind
        self.idle: list[tuple[Connection, float]] = []

    async def take(self) -> Connection:
        if self.idle:
            return self.idle.pop()[0]
        return await self.budget.connect(self._open, kind="lane")

    async def _open(self) -> Connection:
        await asyncio.sleep(0)
        return Connection()

    def give_back(self, connection: Connection) -> None:
        self.idle.append((connection, time.monotonic()))
        self.budget.released(self)

    def idle_since(self) -> float | None:
        return self.idle[0][1] if self.idle else None

    async def shed(self, older_than: float | None = None) -> int:
        closing = [c for c, since in self.idle if older_than is None or since <= older_than][
            : None if older_than is not None else 1
        ]
        self.idle = [(c, s) for c, s in self.idle if c not in closing]
        for connection in closing:
            connection.close()
        self.budget.released()
        return len(closing)


def test_a_budget_below_its_reserve_is_refused_naming_the_value() -> None:
    with pytest.raises(StoreError, match=r"at least 3, got 2"):
        ConnectionBudget(2)
    with pytest.raises(StoreError, match=r"got '20'"):
        ConnectionBudget("20")  # type: ignore[arg-type]


def test_many_callers_share_a_small_budget_and_every_one_gets_a_connection() -> None:
    async def scenario() -> tuple[int, int]:
        budget = ConnectionBudget(4)
        pools = [Pool(budget) for _ in range(10)]  # ten tenants, four connections

        async def work(pool: Pool) -> None:
            for _ in range(5):
                connection = await pool.take()
                await asyncio.sleep(0.01)
                pool.give_back(connection)

        await asyncio.wait_for(asyncio.gather(*(work(p) for p in pools for _ in range(2))), 30)
        return budget.peak, budget.open_count()

    peak, still_open = asyncio.run(scenario())
    assert peak == 4
    assert still_open <= 4


def test_idle_connections_close_after_the_idle_time() -> None:
    async def scenario() -> tuple[int, int]:
        budget = ConnectionBudget(5, idle_seconds=0.1)
        pool = Pool(budget)
        held = [await pool.take() for _ in range(3)]
        for connection in held:
            pool.give_back(connection)
        before = budget.open_count()
        await asyncio.sleep(0.4)
        return before, budget.open_count()

    before, after = asyncio.run(scenario())
    assert (before, after) == (3, 0)


def test_a_caller_that_finds_no_room_waits_and_the_wait_is_said_once() -> None:
    async def scenario() -> tuple[float, int]:
        budget = ConnectionBudget(3)
        pool = Pool(budget)
        held = [await pool.take() for _ in range(3)]
        started = time.monotonic()
        waiters = [asyncio.ensure_future(pool.take()) for _ in range(5)]
        await asyncio.sleep(0.2)
        assert not any(w.done() for w in waiters)  # nobody failed: they wait
        for connection in held:  # three close for good: room for three more
            connection.close()
            budget.released()
        await asyncio.sleep(0.05)
        done = sum(w.done() for w in waiters)
        for waiter in waiters:
            waiter.cancel()
        return time.monotonic() - started, done

    logger = logging.getLogger("ket.store.budget")
    handler = Recorder()
    records = handler.records
    logger.addHandler(handler)
    try:
        _, done = asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
    assert done == 3
    spent = [r.getMessage() for r in records if "budget spent" in r.getMessage()]
    assert len(spent) == 1, spent
    assert "3 of 3 connections open (lane 3)" in spent[0]
    assert "lane work waits for one. Work waits, it does not fail" in spent[0]


def test_connections_held_in_handlers_leave_the_reserve_to_the_workers_own_statements() -> None:
    async def scenario() -> tuple[int, bool, int]:
        budget = ConnectionBudget(5)

        async def engine() -> Connection:
            return await budget.connect(_open, kind="engine")

        engines = [await engine() for _ in range(5 - RESERVED)]
        blocked = asyncio.ensure_future(engine())
        await asyncio.sleep(0.1)
        # the worker's own statements still find their reserved room
        lanes = [await budget.connect(_open, kind="lane") for _ in range(RESERVED)]
        waiting = not blocked.done()
        engines[0].close()
        budget.released()
        await asyncio.wait_for(blocked, 5)
        return len(lanes), waiting, budget.open_count("engine")

    async def _open() -> Connection:
        return Connection()

    lanes, waited, engines_open = asyncio.run(scenario())
    assert (lanes, waited, engines_open) == (RESERVED, True, 5 - RESERVED)


def test_a_connection_collected_without_close_gives_its_room_back() -> None:
    async def scenario() -> int:
        budget = ConnectionBudget(3)

        async def _open() -> Connection:
            return Connection()

        for _ in range(10):  # each dropped at once, never closed
            await asyncio.wait_for(budget.connect(_open, kind="other"), 5)
        return budget.open_count()

    assert asyncio.run(scenario()) == 0


def test_a_server_with_less_room_than_the_budget_is_worked_within_and_said_once() -> None:
    """The server takes 2 connections of this role, the budget says 5: callers past the second
    wait for an idle one rather than fail, and the refusal is logged once."""

    async def scenario() -> tuple[int, int, int]:
        budget = ConnectionBudget(5)
        pools = [Pool(budget) for _ in range(4)]
        opened = 0

        async def server_open() -> Connection:
            nonlocal opened
            if budget.open_count() > 2:  # this one counts itself as being opened
                raise Exception(  # as psycopg's OperationalError says it
                    'connection failed: FATAL:  too many connections for role "ket"'
                )
            opened += 1
            return Connection()

        for pool in pools:
            pool._open = server_open  # type: ignore[method-assign]

        async def work(pool: Pool) -> None:
            for _ in range(3):
                connection = await pool.take()
                await asyncio.sleep(0.01)
                pool.give_back(connection)

        await asyncio.wait_for(asyncio.gather(*(work(p) for p in pools)), 30)
        return budget.peak, opened, budget.ceiling()

    logger = logging.getLogger("ket.store.budget")
    handler = Recorder()
    records = handler.records
    logger.addHandler(handler)
    try:
        peak, opened, ceiling = asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
    assert peak == 2 and ceiling in (2, 3)  # 3 once the next try at one more is due
    assert opened >= 4  # each tenant's pool got connections, taking over idle ones
    refused = [r.getMessage() for r in records if "refused a connection" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in records]
    assert 'too many connections for role "ket"' in refused[0]
    assert "working within 2" in refused[0]


def test_a_server_that_has_room_again_is_used_within_about_a_second() -> None:
    """Another client held every slot, this process none at all: callers wait (they do not
    fail) and, once the server takes connections again, get them within about a second, not
    one per 30 s; the refusals are one warning with their count."""

    async def scenario() -> tuple[float, int]:
        budget = ConnectionBudget(6)
        room = 0  # connections the server takes now

        async def server_open() -> Connection:
            if budget.open_count() > room:  # this one counts itself as being opened
                raise Exception("connection failed: FATAL:  sorry, too many clients already")
            return Connection()

        async def take() -> Connection:
            return await budget.connect(server_open, kind="lane")

        takers = [asyncio.ensure_future(take()) for _ in range(6)]
        await asyncio.sleep(2.0)  # refused, and refused again, for two seconds
        assert not any(taker.done() for taker in takers)
        room = 6
        let_go = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*takers), 10)
        return time.monotonic() - let_go, budget.open_count()

    logger = logging.getLogger("ket.store.budget")
    handler = Recorder()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        took, opened = asyncio.run(scenario())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert opened == 6
    assert took < 1.5, took
    said = [r for r in handler.records if "refused a connection" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "sorry, too many clients already" in said[0].getMessage()
    assert any("takes connections again" in r.getMessage() for r in handler.records)


def test_a_spent_budget_asks_only_the_holders_with_an_idle_connection() -> None:
    """A worker serving a thousand tenants has a thousand lanes: finding an idle connection to
    close must not ask each of them."""

    class Counted(Pool):
        asked = 0

        def idle_since(self) -> float | None:
            Counted.asked += 1
            return super().idle_since()

    async def scenario() -> int:
        budget = ConnectionBudget(4)
        busy = [Counted(budget) for _ in range(1_000)]  # never idle: never to be asked
        idle = Pool(budget)
        held = [await idle.take() for _ in range(4)]
        idle.give_back(held.pop())
        Counted.asked = 0
        await asyncio.wait_for(busy[0].take(), 5)  # takes the room of the idle one
        return Counted.asked

    assert asyncio.run(scenario()) == 0


def test_an_urgent_wait_goes_before_the_others() -> None:
    """Heartbeats and settlements keep leases: a herd of sweeps must not hold them back."""

    async def scenario() -> list[str]:
        budget = ConnectionBudget(3)
        pool = Pool(budget)
        held = [await pool.take() for _ in range(3)]
        served: list[str] = []

        async def wait(name: str, urgent: bool) -> None:
            if urgent:
                with ket_budget.urgent():
                    await pool.take()
            else:
                await pool.take()
            served.append(name)

        sweeps = [asyncio.ensure_future(wait(f"sweep {n}", False)) for n in range(5)]
        await asyncio.sleep(0.01)
        heartbeat = asyncio.ensure_future(wait("heartbeat", True))
        await asyncio.sleep(0.01)
        held[0].close()
        budget.released()
        await asyncio.wait_for(heartbeat, 5)
        for task in sweeps:
            task.cancel()
        return served

    assert asyncio.run(scenario()) == ["heartbeat"]


def test_a_connection_just_gone_idle_is_kept_a_moment_for_its_own_holder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant's claim right after its sweep reuses the sweep's connection rather than losing
    it to another tenant's wait and opening a new one."""
    # a longer keep than the real one, so that the steps below fit inside it on a busy machine
    monkeypatch.setattr(ket_budget, "KEEP_FOR_OWNER_SECONDS", 0.1)

    async def scenario() -> tuple[bool, bool, float]:
        budget = ConnectionBudget(3)
        mine, other = Pool(budget), Pool(budget)
        held = [await mine.take() for _ in range(3)]
        waiting = asyncio.ensure_future(other.take())
        await asyncio.sleep(0.01)
        mine.give_back(held[0])
        await asyncio.sleep(0.01)  # within KEEP_FOR_OWNER_SECONDS: still its own
        again = await mine.take()
        kept = again is held[0] and not waiting.done()
        mine.give_back(again)
        gave_at = time.monotonic()
        await asyncio.wait_for(waiting, 5)  # then the other tenant gets the room
        return kept, again.closed, time.monotonic() - gave_at

    kept, closed, after = asyncio.run(scenario())
    assert kept
    assert closed  # closed to make room for the other holder
    assert ket_budget.KEEP_FOR_OWNER_SECONDS * 0.9 <= after < 1.0


class SlowGoodbyes(Pool):
    """A holder whose connections take `goodbye` seconds to be gone once closed (the server
    process exiting), as a lane's shed waits for; it records how many were gone-or-open at
    once, the count a server would show."""

    def __init__(self, budget: ConnectionBudget, goodbye: float, server: list[int]) -> None:
        super().__init__(budget)
        self.goodbye = goodbye
        self.server = server  # [now, most]: connections the server counts

    async def _open(self) -> Connection:
        self.server[0] += 1
        self.server[1] = max(self.server[1], self.server[0])
        return Connection()

    async def shed(self, older_than: float | None = None) -> int:
        if not self.idle:
            return 0
        connection, _ = self.idle.pop(0)
        connection.close()
        await asyncio.sleep(self.goodbye)  # the server still counts it meanwhile
        self.server[0] -= 1
        self.budget.released()
        return 1


def test_many_waiters_shed_idle_connections_side_by_side_never_over_the_limit() -> None:
    """After a tick every tenant wants a connection at once: the idle ones of other tenants are
    shed in parallel, not one goodbye after another, and the server never counts more than
    the limit, goodbyes still under way included."""
    limit, goodbye = 10, 0.2

    async def scenario() -> tuple[float, int]:
        budget = ConnectionBudget(limit)
        server = [0, 0]
        holders = [SlowGoodbyes(budget, goodbye, server) for _ in range(2 * limit)]
        for holder in holders[:limit]:  # the budget full of idle connections, ripe to shed
            holder.give_back(await holder.take())
        await asyncio.sleep(ket_budget.KEEP_FOR_OWNER_SECONDS + 0.05)
        began = time.monotonic()
        taken = await asyncio.wait_for(asyncio.gather(*(h.take() for h in holders[limit:])), 30)
        took = time.monotonic() - began
        assert len(taken) == budget.open_count() == limit  # the budget counts what is held
        return took, server[1]

    took, most = asyncio.run(scenario())
    assert most <= limit
    # one goodbye after another would take limit * goodbye = 2 s
    assert took < 4 * goodbye, f"{limit} waiters took {took:.2f} s"


def _serving_order(arrivals: list[tuple[str, str]], *, promote: str | None = None) -> list[str]:
    """Three connections held; waiters arrive in order, each `(name, tier)` with tier urgent,
    prompt or normal (`promote` names a normal one made prompt while it waits); then the
    connections come free one at a time. The order they were served in."""

    async def scenario() -> list[str]:
        budget = ConnectionBudget(3)
        pool = Pool(budget)
        held = [await pool.take() for _ in range(3)]
        served: list[str] = []
        tickets: dict[str, ket_budget.Ticket] = {}

        async def wait(name: str, tier: str) -> None:
            ticket = ket_budget.Ticket(
                {"urgent": ket_budget.URGENT, "prompt": ket_budget.PROMPT}.get(
                    tier, ket_budget.NORMAL
                )
            )
            tickets[name] = ticket
            with ket_budget.waiting_as(ticket):
                connection = await pool.take()
            served.append(name)
            held.append(connection)

        tasks = []
        for name, tier in arrivals:
            tasks.append(asyncio.ensure_future(wait(name, tier)))
            await asyncio.sleep(0.005)
        if promote is not None:
            budget.promote(tickets[promote])
        while len(served) < len(arrivals):
            held.pop(0).close()
            budget.released()
            await asyncio.sleep(0.005)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return served

    return asyncio.run(scenario())


def test_a_claim_for_an_applications_job_waits_after_lease_keeping_before_the_herd() -> None:
    """After a tick a herd of sweeps waits; the claim for a job the application just enqueued
    goes after the heartbeats, ahead of the herd."""
    order = _serving_order(
        [("sweep 1", "normal"), ("sweep 2", "normal"), ("claim", "prompt"), ("beat", "urgent")]
    )
    assert order == ["beat", "claim", "sweep 1", "sweep 2"]


def test_a_waiting_claim_hurried_by_a_hint_moves_ahead_of_the_herd() -> None:
    order = _serving_order(
        [("sweep 1", "normal"), ("sweep 2", "normal"), ("claim", "normal")], promote="claim"
    )
    assert order == ["claim", "sweep 1", "sweep 2"]


def test_prompt_waits_do_not_pass_work_that_waited_long(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of application jobs cannot hold a sweep back past PROMPT_AHEAD_SECONDS."""
    monkeypatch.setattr(ket_budget, "PROMPT_AHEAD_SECONDS", 0.0)
    order = _serving_order([("sweep", "normal"), ("claim", "prompt")])
    assert order == ["sweep", "claim"]


def test_the_listener_and_the_hint_connection_do_not_eat_the_workers_reserve() -> None:
    # At --max-connections 4 with tenants registered on PostgreSQL, the LISTEN connection and
    # the one sending wake-up hints held 2: two handlers in ctx.tx took the other 2, and the
    # heartbeats found no room for as long as the transactions lasted (their attempts aborted,
    # leases lost). The engines' share leaves the reserve beside those two.
    async def scenario() -> tuple[bool, int, int]:
        budget = ConnectionBudget(4)

        async def _open() -> Connection:
            return Connection()

        listener = await budget.connect(_open, kind="listener")
        hints = await budget.connect(_open, kind="other")
        first = await budget.connect(_open, kind="engine")
        second = asyncio.ensure_future(budget.connect(_open, kind="engine"))
        await asyncio.sleep(0.1)
        # a heartbeat's connection: at once, while the second handler waits
        heartbeat = await asyncio.wait_for(budget.connect(_open, kind="lane"), 1)
        waited = not second.done()
        first.close()
        budget.released()
        await asyncio.wait_for(second, 5)
        for connection in (heartbeat, listener, hints):
            connection.close()
        return waited, budget.open_count("engine"), budget.peak

    waited, engines, peak = asyncio.run(scenario())
    assert (waited, engines, peak) == (True, 1, 4)


def test_a_process_has_a_budget_on_each_postgresql_server() -> None:
    from ket import process

    with process.fresh():
        ket_budget.install_per_server(5)
        one = ket_budget.current("postgresql://root@10.0.0.1:5432/t1")
        assert one is not None and one.limit == 5 and one.server == "10.0.0.1:5432"
        # another database on the same server shares its budget; another server has its own
        assert ket_budget.current("postgresql+psycopg://app:pw@10.0.0.1/t2") is one
        other = ket_budget.current("postgresql://root@10.0.0.2:6432/t1")
        assert other is not None and other is not one and other.server == "10.0.0.2:6432"
        assert ket_budget.current("sqlite:///tenant.db") is None  # nothing to count
        assert ket_budget.every() == [one, other]
        ket_budget.install(None)
        assert ket_budget.current("postgresql://root@10.0.0.1:5432/t1") is None
