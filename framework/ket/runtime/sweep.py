"""Schedule sweeps: every replica sweeps, the store's compare-and-set makes each tick fire once."""

from __future__ import annotations

from datetime import datetime

from ket.catalog import Catalog, JobSpec
from ket.errors import JobRejected, StoreError
from ket.runtime.events import Event, Hooks
from ket.store.contract import JobStore, ScheduleControl
from ket.store.types import Inserted, ScheduleState, TickClaim


async def sweep(store: JobStore, catalog: Catalog, *, tenant: str, hooks: Hooks) -> int:
    """Claim the current tick of every due schedule once; returns how many ticks fired here."""
    scheduled = [spec for spec in catalog.jobs.values() if spec.schedule is not None]
    if not scheduled:
        return 0
    now = await store.now()
    states = await store.schedule_get([spec.name for spec in scheduled])
    fired = 0
    for spec in scheduled:
        claim = _claim(catalog, spec, states.get(spec.name), now)
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
    return fired


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


async def run_now(store: JobStore, catalog: Catalog, name: str) -> Inserted:
    """Fire the schedule of job `name` once, now, as a tick would (the same job, with its
    instant as the tick and nothing skipped, and a fire in the ledger); the schedule's own
    ticks go on as before. JobRejected when `name` is not a scheduled job of the catalog."""
    spec = catalog.job(name)
    if spec.schedule is None:
        raise JobRejected(f"job {name!r} has no schedule")
    if not isinstance(store, ScheduleControl):
        raise StoreError(f"this store ({type(store).__name__}) cannot run a schedule now")
    tick = await store.now()
    job = catalog.new_job(spec.name, None, tick=tick, ticks_skipped=0)
    return await store.schedule_run_now(spec.name, spec.schedule.fingerprint, job)


class SweepService:
    """Sweeps the deployment's schedules for one tenant every `schedule_sweep_ms`."""

    name = "schedule sweep"

    def __init__(self, store: JobStore, catalog: Catalog, hooks: Hooks, *, tenant: str) -> None:
        self._store = store
        self._catalog = catalog
        self._hooks = hooks
        self._tenant = tenant
        self.interval = catalog.worker.schedule_sweep_ms / 1000

    async def tick(self) -> None:
        await sweep(self._store, self._catalog, tenant=self._tenant, hooks=self._hooks)
