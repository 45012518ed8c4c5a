"""The job stats service behind the gauges: one `tick()` reads every served tenant's stats and
publishes them; a tenant that fails keeps its last stats and the failure reaches the supervisor;
a tenant no longer served drops out."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from ket.errors import StoreError
from ket.runtime.stats import Snapshot, StatsService
from ket.store import JobStats, NewJob
from ket.store.contract import JobStore
from ket.store.memory import MemoryStore
from ket.store.types import ClaimLimits


class Flaky(MemoryStore):
    """A memory store whose job stats fail while `down`."""

    down = False

    async def job_stats(self, limits: Mapping[str, ClaimLimits] | None = None) -> JobStats:
        if self.down:
            raise StoreError("the database is away")
        return await super().job_stats(limits)


def test_a_tick_publishes_every_served_tenant_s_stats_and_drops_removed_ones() -> None:
    async def main() -> list[Snapshot]:
        acme, globex = MemoryStore(), MemoryStore()
        await acme.job_insert([NewJob(name="t.work") for _ in range(3)])
        await globex.job_insert([NewJob(name="t.work", queue="mail")])
        served: dict[str, JobStore] = {"acme": acme, "globex": globex}
        published: list[Snapshot] = []
        service = StatsService(lambda: served, published.append, interval=15.0)
        await service.tick()
        del served["globex"]
        await service.tick()
        return published

    first, second = asyncio.run(main())
    assert {t: dict(s.counts) for t, s in first.items()} == {
        "acme": {("available", "default"): 3},
        "globex": {("available", "mail"): 1},
    }
    assert set(second) == {"acme"}


def test_a_tenant_whose_stats_fail_keeps_its_last_ones_and_the_tick_raises_naming_it() -> None:
    async def main() -> tuple[list[Snapshot], str]:
        acme, globex = Flaky(), MemoryStore()
        await acme.job_insert([NewJob(name="t.work")])
        served: Mapping[str, JobStore] = {"acme": acme, "globex": globex}
        published: list[Snapshot] = []
        service = StatsService(lambda: served, published.append, interval=15.0)
        await service.tick()
        acme.down = True
        await acme.job_insert([NewJob(name="t.work")])  # not seen: its stats cannot be read
        with pytest.raises(StoreError) as raised:
            await service.tick()
        return published, str(raised.value)

    (first, second), message = asyncio.run(main())
    assert second["acme"] == first["acme"]  # the last known stats, not a dip to nothing
    assert set(second) == {"acme", "globex"}  # the healthy tenant was still published
    assert (
        message == "could not read the job stats of tenant acme: StoreError: the database is away"
    )


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        StatsService(dict, lambda snapshot: None, interval=0)
