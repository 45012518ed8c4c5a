"""The tenant share: membership from presence reports, the first roster read before any tenant,
and a fleet that follows the peers (starting what it gains, stopping what it gives up, keeping
its tenants when the roster cannot be read)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.errors import StoreError
from ket.runtime.events import Hooks
from ket.runtime.fleet import Fleet
from ket.runtime.ownership import owned
from ket.runtime.share import TenantShare
from ket.runtime.sweep import SWEEPS_PER_SECOND
from ket.store.contract import JobStore
from ket.store.memory import MemoryStore
from ket.store.roster import SeenWorker, WorkerInfo
from ket.transport import CaptureSender

TENANTS = [f"t{n}" for n in range(12)]


async def noop(ctx: object, input: object) -> None:
    return None


CATALOG = Catalog.build(
    define_deployment(
        name="t",
        modules=[define_module(name="t", jobs={"work": define_job(idempotent=True, handler=noop)})],
        worker={"queues": {"default": 1}, "shutdown_grace_ms": 0},
    )
)


def _info(worker_id: str) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="box",
        pid=1,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        tenants=None,
        queues={"default": 1},
        version="1.0",
        manifest_hash="a" * 64,
        interval_seconds=1.0,
    )


def _rows(*ids: str, stale: tuple[str, ...] = ()) -> list[SeenWorker]:
    return [
        SeenWorker(
            info=_info(i),
            last_seen_at=datetime.now(UTC),
            seen_seconds_ago=10.0 if i in stale else 0.1,
        )
        for i in ids
    ]


class Roster:
    """What the presence report of worker `me` would find: the rows set by the test."""

    def __init__(self, share_of: Callable[[], TenantShare], *ids: str) -> None:
        self._share_of = share_of
        self.rows = _rows("me", *ids)
        self.reads = 0
        self.broken = False

    async def report(self) -> None:
        self.reads += 1
        if self.broken:
            raise StoreError("control database 'ket_registry': connection refused")
        self._share_of().see(_info("me"), self.rows)


def _share(*others: str) -> tuple[TenantShare, Roster]:
    holder: list[TenantShare] = []
    roster = Roster(lambda: holder[0], *others)
    holder.append(TenantShare(read=roster.report))
    return holder[0], roster


def test_a_lone_tenant_is_everyone_s_and_needs_no_roster() -> None:
    share, roster = _share("w2", "w3")
    assert asyncio.run(share.mine(["default"])) == {"default"}
    assert roster.reads == 0 and share.peers is None


def test_several_tenants_read_the_roster_once_before_choosing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "ket.worker")
    share, roster = _share("w2", "w3")

    async def twice() -> tuple[frozenset[str], frozenset[str]]:
        return await share.mine(TENANTS), await share.mine(TENANTS)

    first, second = asyncio.run(twice())
    assert first == second == owned("me", TENANTS, ["me", "w2", "w3"])
    assert roster.reads == 1
    said = [r.getMessage() for r in caplog.records if "shared among" in r.getMessage()]
    assert said == [f"this worker serves {len(first)} of 12 tenants, shared among 3 workers"]


def test_stale_peers_do_not_count() -> None:
    share, roster = _share("w2", "w3")
    roster.rows = _rows("me", "w2", "w3", stale=("w3",))
    assert asyncio.run(share.mine(TENANTS)) == owned("me", TENANTS, ["me", "w2"])


def test_after_an_outage_a_peer_that_looks_stale_gets_time_to_report_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The control database was away: this worker's reports failed, and its peer's rows look
    stale when it reads again. The peer keeps its tenants for three of its intervals (a peer
    that reports meanwhile never loses them); one that does not report by then is taken for
    dead. Without a gap in this worker's own reads, a stale peer is dropped at once."""
    caplog.set_level(logging.INFO, "ket.worker")
    now = [100.0]
    share = TenantShare(read=lambda: asyncio.sleep(0), clock=lambda: now[0])
    me = _info("me")
    share.see(me, _rows("me", "w2", "w3"))
    now[0] += 1.0
    share.see(me, _rows("me", "w2", "w3", stale=("w3",)))  # no gap: w3 died
    assert share.peers == frozenset({"me", "w2"})
    now[0] += 10.0  # ten seconds without a report read
    share.see(me, _rows("me", "w2", stale=("w2",)))
    assert share.peers == frozenset({"me", "w2"})  # excused
    assert "could not read the worker roster for 10.0 s: w2" in caplog.text
    now[0] += 2.5
    share.see(me, _rows("me", "w2", stale=("w2",)))
    assert share.peers == frozenset({"me", "w2"})  # still within its three intervals
    now[0] += 1.0
    share.see(me, _rows("me", "w2", stale=("w2",)))
    assert share.peers == frozenset({"me"})  # it had its time: taken for dead
    share.see(me, _rows("me", "w2"))  # it was alive after all: back
    now[0] += 10.0  # another outage; this time the peer reports within its time
    share.see(me, _rows("me", "w2", stale=("w2",)))
    assert share.peers == frozenset({"me", "w2"})
    now[0] += 1.0
    share.see(me, _rows("me", "w2"))
    now[0] += 5.0
    share.see(me, _rows("me", "w2"))
    assert share.peers == frozenset({"me", "w2"})


def test_a_roster_that_cannot_be_read_at_first_chooses_nothing() -> None:
    share, roster = _share("w2")
    roster.broken = True
    with pytest.raises(StoreError, match="connection refused"):
        asyncio.run(share.mine(TENANTS))


def test_changed_returns_only_when_the_peers_differ_from_the_last_choice() -> None:
    share, _ = _share("w2")

    async def scenario() -> None:
        await share.mine(TENANTS)
        share.see(_info("me"), _rows("me", "w2"))  # the same peers: no change
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(share.changed(), 0.05)
        share.see(_info("me"), _rows("me", "w2", "w3"))
        await asyncio.wait_for(share.changed(), 1.0)
        await asyncio.wait_for(share.changed(), 1.0)  # not chosen again yet: still changed
        await share.mine(TENANTS)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(share.changed(), 0.05)

    asyncio.run(scenario())


def _fleet(share: TenantShare, tenants: list[str], opened: list[str]) -> Fleet:
    async def list_tenants() -> dict[str, str | None]:
        return dict.fromkeys(tenants)

    async def open_store(url: str) -> JobStore:
        opened.append(url.rsplit("/", 1)[1].removesuffix(".db"))
        return MemoryStore()

    return Fleet(
        catalog=CATALOG,
        template="sqlite:///tenants/{tenant}.db",  # never opened: open_store is a fake
        list_tenants=list_tenants,
        open_store=open_store,
        worker_id="me",
        sender=CaptureSender(),
        hooks=Hooks(),
        share=share,
    )


async def _until(condition: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(5):
        while not condition():
            await asyncio.sleep(0.01)
    assert condition(), what


def _serving(scenario: Callable[[Fleet, Roster, list[str]], Awaitable[None]]) -> None:
    async def main() -> None:
        share, roster = _share("w2", "w3")
        opened: list[str] = []
        fleet = _fleet(share, TENANTS, opened)
        stop = asyncio.Event()
        running = asyncio.ensure_future(fleet.run(stop))
        try:
            await scenario(fleet, roster, opened)
        finally:
            stop.set()
            await running

    asyncio.run(main())


def test_the_fleet_serves_only_its_own_tenants_and_follows_the_peers_at_once() -> None:
    async def scenario(fleet: Fleet, roster: Roster, opened: list[str]) -> None:
        three = owned("me", TENANTS, ["me", "w2", "w3"])
        await _until(lambda: set(fleet.workers) == three, "the first share")
        assert sorted(opened) == sorted(three)  # never opened a tenant of another worker
        assert roster.reads == 1  # the roster was read before the first tenant

        roster.rows = _rows("me", "w2", "w3", stale=("w3",))  # w3 was killed
        await roster.report()  # the presence service's next tick
        two = owned("me", TENANTS, ["me", "w2"])
        await _until(lambda: set(fleet.workers) == two, "w3's tenants taken over")
        assert two > three

        roster.rows = _rows("me", "w2", "w3", "w4")  # w3 is back and w4 joined
        await roster.report()
        four = owned("me", TENANTS, ["me", "w2", "w3", "w4"])
        await _until(lambda: set(fleet.workers) == four, "the tenants given up stopped")

    _serving(scenario)


def test_the_fleet_keeps_its_tenants_while_the_roster_cannot_be_read() -> None:
    async def scenario(fleet: Fleet, roster: Roster, opened: list[str]) -> None:
        three = owned("me", TENANTS, ["me", "w2", "w3"])
        await _until(lambda: set(fleet.workers) == three, "the first share")
        roster.broken = True
        with pytest.raises(StoreError):
            await roster.report()  # the supervisor logs this, rate limited
        await fleet.refresh()  # the periodic refresh meanwhile
        assert set(fleet.workers) == three  # not dropped, and not all taken either

    _serving(scenario)


def test_a_fleet_of_one_tenant_never_reads_the_roster() -> None:
    async def main() -> None:
        share, roster = _share("w2", "w3")
        opened: list[str] = []
        fleet = _fleet(share, [], opened)  # no registry: the single tenant `default`
        await fleet.refresh()
        try:
            assert set(fleet.workers) == {"default"} and roster.reads == 0
        finally:
            for name in list(fleet.workers):
                await fleet.workers[name].stop(grace_seconds=0)
                del fleet.workers[name]

    asyncio.run(main())


def test_a_fleet_of_one_tenant_refreshes_once_per_change_of_peers_not_in_a_loop() -> None:
    async def main() -> None:
        share, roster = _share("w2")
        listed: list[int] = []

        async def list_tenants() -> dict[str, str | None]:
            listed.append(1)
            await asyncio.sleep(0)  # as a registry read does: a refresh loop would spin, not hang
            return {}  # the single tenant `default`

        fleet = _fleet(share, [], [])
        fleet._list = list_tenants  # counts the refreshes
        stop = asyncio.Event()
        running = asyncio.ensure_future(fleet.run(stop))
        try:
            await _until(lambda: set(fleet.workers) == {"default"}, "the lone tenant served")
            await roster.report()  # the presence service's tick: peers seen the first time
            await asyncio.sleep(0.2)
            roster.rows = _rows("me", "w2", "w3")
            await roster.report()
            await asyncio.sleep(0.2)
            assert 1 <= len(listed) <= 3  # the first refresh and one per change at most
        finally:
            stop.set()
            await running

    asyncio.run(main())


def test_tenant_workers_spread_their_sweeps_over_the_whole_fleet_s_tenants() -> None:
    """Four workers sharing a thousand tenants together sweep about as many a second after a
    tick as one worker would (sweep offsets over every registered tenant), while each paces
    its safety visits by the tenants it serves itself."""

    async def scenario(fleet: Fleet, roster: Roster, opened: list[str]) -> None:
        three = owned("me", TENANTS, ["me", "w2", "w3"])
        await _until(lambda: set(fleet.workers) == three, "the first share")
        assert len(three) < len(TENANTS)
        for worker in fleet.workers.values():
            assert worker._fleet() == len(TENANTS)
            assert worker._served() == len(three)

    _serving(scenario)


def test_tenants_taken_over_spread_their_first_visits_over_their_share_not_the_fleet_s() -> None:
    """A fleet's start spreads every tenant's first visit over the whole fleet's count; the
    tenants of a worker that died, whose new jobs have waited for a new owner already, over
    about their own number (this worker's new ones, scaled by its share of the fleet)."""

    async def scenario(fleet: Fleet, roster: Roster, opened: list[str]) -> None:
        three = owned("me", TENANTS, ["me", "w2", "w3"])
        await _until(lambda: set(fleet.workers) == three, "the first share")
        fleet_spread = len(TENANTS) / SWEEPS_PER_SECOND
        for worker in fleet.workers.values():
            assert worker._start_spread() == pytest.approx(fleet_spread)
        roster.rows = _rows("me", "w2", "w3", stale=("w3",))  # w3 was killed
        await roster.report()
        two = owned("me", TENANTS, ["me", "w2"])
        await _until(lambda: set(fleet.workers) == two, "w3's tenants taken over")
        taken = two - three
        assert taken
        # w3's part as this worker sees it: its own new ones times the fleet over its share
        together = len(taken) * len(TENANTS) / len(two)
        for name, worker in fleet.workers.items():
            expected = together if name in taken else len(TENANTS)
            assert worker._start_spread() == pytest.approx(expected / SWEEPS_PER_SECOND)
        assert together < len(TENANTS)

    _serving(scenario)
