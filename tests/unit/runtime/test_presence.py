"""The worker presence service: reports, the manifest warning once per hash, moves, leaving."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest

from ket.runtime.presence import PresenceService, presence_interval
from ket.store.roster import SeenWorker, WorkerInfo

MINE = "a" * 64
THEIRS = "b" * 64


def _info(worker_id: str, digest: str) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="box",
        pid=1,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        tenants=None,
        queues={"default": 2},
        version="1.0",
        manifest_hash=digest,
        interval_seconds=1.0,
    )


class ListRoster:
    """A roster in a dict: the rows another worker would have written, and this one's."""

    def __init__(self, others: list[SeenWorker]) -> None:
        self.rows = {w.info.id: w for w in others}
        self.closed = False

    async def worker_report(
        self, info: WorkerInfo, *, forget_after_seconds: float = 86_400.0
    ) -> list[SeenWorker]:
        self.rows[info.id] = SeenWorker(
            info=info, last_seen_at=datetime.now(UTC), seen_seconds_ago=0.0
        )
        return list(self.rows.values())

    async def worker_list(self) -> list[SeenWorker]:
        return list(self.rows.values())

    async def worker_remove(self, worker_id: str) -> bool:
        return self.rows.pop(worker_id, None) is not None

    async def close(self) -> None:
        self.closed = True


def _seen(info: WorkerInfo, ago: float = 0.5) -> SeenWorker:
    return SeenWorker(info=info, last_seen_at=datetime.now(UTC), seen_seconds_ago=ago)


def _service(rosters: dict[str, ListRoster], where: list[str]) -> PresenceService:
    async def describe() -> WorkerInfo:
        return _info("me", MINE)

    async def locate() -> str:
        return where[0]

    return PresenceService(
        describe=describe, locate=locate, open_roster=rosters.__getitem__, interval=1.0
    )


def test_another_live_manifest_is_warned_once_naming_both_hashes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = _seen(_info("other", THEIRS))
    same = _seen(_info("twin", MINE))
    gone = _seen(_info("gone", "c" * 64), ago=10.0)  # stale: not warned about
    roster = ListRoster([other, same, gone])
    service = _service({"db": roster}, ["db"])
    caplog.set_level(logging.WARNING, "ket.worker")

    async def three_ticks() -> None:
        for _ in range(3):
            await service.tick()

    asyncio.run(three_ticks())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"worker other on box runs manifest {THEIRS[:12]}" in warnings[0]
    assert f"this worker (me) runs manifest {MINE[:12]}" in warnings[0]
    assert "me" in roster.rows  # reported itself


def test_a_second_other_hash_gets_its_own_warning(caplog: pytest.LogCaptureFixture) -> None:
    roster = ListRoster([_seen(_info("other", THEIRS))])
    service = _service({"db": roster}, ["db"])
    caplog.set_level(logging.WARNING, "ket.worker")
    asyncio.run(service.tick())
    third = _info("third", "d" * 64)
    roster.rows["third"] = _seen(third)
    asyncio.run(service.tick())
    texts = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [("b" * 12 in t, "d" * 12 in t) for t in texts] == [(True, False), (False, True)]


def test_when_the_control_database_moves_the_old_row_goes_and_leave_removes_the_new() -> None:
    first, second = ListRoster([]), ListRoster([])
    where = ["one"]
    service = _service({"one": first, "two": second}, where)

    async def run() -> None:
        await service.tick()
        assert "me" in first.rows
        where[0] = "two"
        await service.tick()
        assert "me" not in first.rows and first.closed
        assert "me" in second.rows
        await service.leave()

    asyncio.run(run())
    assert second.rows == {} and second.closed


def test_the_interval_is_a_third_of_the_lease_within_bounds() -> None:
    assert presence_interval(6_000) == 2.0
    assert presence_interval(300) == 1.0
    # a killed worker's tenants move within about 15 s, however long the lease
    assert presence_interval(30_000) == 5.0
    assert presence_interval(3_600_000) == 5.0
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        PresenceService(describe=None, locate=None, open_roster=None, interval=0)  # type: ignore[arg-type]


def test_watchers_hear_each_report_until_the_worker_departs_and_lists_no_tenants() -> None:
    roster = ListRoster([_seen(_info("other", MINE))])
    service = _service({"db": roster}, ["db"])
    heard: list[tuple[str, list[str]]] = []
    service.watch(lambda me, seen: heard.append((me.id, sorted(w.info.id for w in seen))))

    async def run() -> None:
        await service.depart()  # never reported: nothing to tell, nothing reported
        assert "me" not in roster.rows
        await service.tick()
        await service.tick()
        await service.depart()
        await service.tick()  # the supervisor's tick while running jobs finish

    asyncio.run(run())
    assert heard == [("me", ["me", "other"])] * 2
    assert roster.rows["me"].info.tenants == ()  # still listed, serving no tenant
