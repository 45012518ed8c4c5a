"""Schedule sweeps: every replica sweeps, the store's compare-and-set makes each tick fire once.

A worker sweeps a tenant's schedules when it starts, at each schedule's next tick (known from
the catalog and the states it just read: no polling for it), and every `schedule_sweep_ms`
while no tick is due sooner, so that a resumed schedule is seen (a tenant woken by hints is
swept between ticks by its safety visit instead, runtime/visit.py). A fleet serving many
tenants spreads their sweeps after each tick rather than sweeping them all at its instant: each
tenant sweeps at its own fixed offset within `tenants / SWEEPS_PER_SECOND` seconds, `tenants`
being how many the worker processes sharing them serve together (so that four workers make
about as many sweeps a second as one), or over half the shortest schedule's period when that
is shorter.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from datetime import datetime

from ket.catalog import Catalog, JobSpec
from ket.runtime.events import Event, Hooks
from ket.runtime.visit import VISIT_AT_LEAST_SECONDS, visit_every
from ket.store.contract import JobStore
from ket.store.types import ScheduleState, TickClaim


async def sweep(store: JobStore, catalog: Catalog, *, tenant: str, hooks: Hooks) -> int:
    """Claim the current tick of every due schedule once; returns how many ticks fired here."""
    fired, _, _ = await sweep_until(store, catalog, tenant=tenant, hooks=hooks)
    return fired


async def sweep_until(
    store: JobStore, catalog: Catalog, *, tenant: str, hooks: Hooks
) -> tuple[int, float | None, float | None]:
    """`sweep`, the seconds from now until the next tick of a schedule that is not paused
    (None: there is none), and the shortest period between two ticks of those."""
    scheduled = [spec for spec in catalog.jobs.values() if spec.schedule is not None]
    if not scheduled:
        return 0, None, None
    now = await store.now()
    states = await store.schedule_get([spec.name for spec in scheduled])
    fired = 0
    due: datetime | None = None
    period: float | None = None
    for spec in scheduled:
        state = states.get(spec.name)
        if state is None or not state.paused:  # after this sweep its last tick is now's
            assert spec.schedule is not None
            following = spec.schedule.next_tick(now)
            due = following if due is None else min(due, following)
            gap = (following - spec.schedule.tick_at(now)).total_seconds()
            period = gap if period is None else min(period, gap)
        claim = _claim(catalog, spec, state, now)
        if claim is None:
            continue
        result = await store.schedule_claim_tick(claim)
        if result.won and result.job is not None:
            fired += 1
            if hooks.wanted("schedule_fired"):
                hooks.emit(
                    Event(
                        kind="schedule_fired",
                        tenant=tenant,
                        job_id=result.job.id,
                        name=spec.name,
                        queue=spec.queue,
                        skipped=claim.skipped,
                        detail=f"tick={claim.tick.isoformat()}",
                    )
                )
    return fired, None if due is None else (due - now).total_seconds(), period


def _claim(
    catalog: Catalog, spec: JobSpec, state: ScheduleState | None, now: datetime
) -> TickClaim | None:
    """What to claim for one schedule now: install, reset, fire, or nothing."""
    schedule = spec.schedule
    assert schedule is not None
    tick = schedule.tick_at(now)
    fingerprint = schedule.fingerprint
    if state is None:  # first sighting: installed in this tick, which therefore does not fire
        return TickClaim(schedule_id=spec.name, fingerprint=fingerprint, tick=tick, expected=None)
    if state.fingerprint != fingerprint:  # a changed definition is a new schedule
        return TickClaim(schedule_id=spec.name, fingerprint=fingerprint, tick=tick, expected=state)
    if state.paused or state.last_tick >= tick:  # paused: its ticks wait, counted once resumed
        return None
    skipped = schedule.count_ticks(state.last_tick, tick)
    job = catalog.new_job(spec.name, None, tick=tick, ticks_skipped=skipped)
    return TickClaim(
        schedule_id=spec.name,
        fingerprint=fingerprint,
        tick=tick,
        expected=state,
        skipped=skipped,
        job=job,
    )


# How long after its tick a sweep comes at the earliest: enough for the database's clock to
# have passed it.
AFTER_TICK_SECONDS = 0.01
# How many tenants the worker processes sweep a second together, at most, after a tick they share.
SWEEPS_PER_SECOND = 50.0


def sweep_offset(tenant: str, tenants: int, period: float) -> float:
    """The tenant's own offset after each tick, when the fleet serves `tenants` and the
    shortest schedule's period is `period`: fixed for the tenant, spread evenly over
    `tenants / SWEEPS_PER_SECOND` seconds, or over half the period when that is shorter (so
    that no tick is swept later than that, and none of them all at the same last instant)."""
    share = zlib.crc32(tenant.encode()) / 2**32
    return share * min(tenants / SWEEPS_PER_SECOND, period / 2)


class SweepService:
    """Sweeps the deployment's schedules for one tenant at each tick, and every
    `schedule_sweep_ms` while no tick is due sooner (at a random part of it, so that tenants
    spread out). A process serving more tenants than it visits in that time sweeps them while
    no tick is due at the visits' pace (`visit_every`, `schedule_sweep_ms` its floor): with a
    thousand tenants whose schedules tick hourly, sweeping each every 30 s would open some 40
    connections a second."""

    name = "schedule sweep"

    def __init__(
        self,
        store: JobStore,
        catalog: Catalog,
        hooks: Hooks,
        *,
        tenant: str,
        served: Callable[[], int] = lambda: 1,  # how many tenants this process serves
        fleet: Callable[[], int] | None = None,  # how many all the worker processes serve
        between_ticks: bool = True,
    ) -> None:
        """`between_ticks` False: the tenant's safety visit sweeps it too, on the connection
        it opens anyway, every `visit_every(served())` seconds; this sweeps between ticks only
        where `schedule_sweep_ms` asks for less than the visits' 30 s (None from `tick()`: no
        sweep before the next visit)."""
        self._store = store
        self._catalog = catalog
        self._hooks = hooks
        self._tenant = tenant
        self._served = served
        self._fleet = fleet or served
        self._between_ticks = between_ticks
        self.interval = catalog.worker.schedule_sweep_ms / 1000

    async def tick(self) -> float | None:
        _, due, period = await sweep_until(
            self._store, self._catalog, tenant=self._tenant, hooks=self._hooks
        )
        idle = self._idle()
        if due is None or period is None:
            return idle
        at_tick = due + max(sweep_offset(self._tenant, self._fleet(), period), AFTER_TICK_SECONDS)
        return at_tick if due <= self.interval or idle is None else min(idle, at_tick)

    def _idle(self) -> float | None:
        """When to sweep again if no tick comes sooner (None: the visits see to it)."""
        if not self._between_ticks and self.interval >= VISIT_AT_LEAST_SECONDS:
            return None  # the visits come as often as asked for (more seldom past 240 tenants)
        return visit_every(self._served(), at_least=self.interval) * random.uniform(0.5, 1.0)
