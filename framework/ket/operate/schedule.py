"""The deployment's schedules in one tenant as an operator sees them (`ket schedules list`, the
dashboard): last tick claimed, last fire with its skipped ticks, next tick, a pause; and what an
operator does to them (pause, resume, run now), each written to the tenant's audit log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ket.catalog import Catalog, JobSpec
from ket.errors import KetError
from ket.operate.action import Actor
from ket.operate.audit import record
from ket.store.contract import JobStore, QueryableStore, ScheduleControl
from ket.store.types import AuditEntry, Fire, Inserted


@dataclass(frozen=True, kw_only=True, slots=True)
class ScheduleRow:
    """One scheduled job: its schedule (described), whether a sweep `installed` its current
    definition, a pause, the last tick claimed, the next tick, the last fire (with how many
    ticks it skipped) and the ticks that came due while it was paused."""

    job: str
    schedule: str
    paused: bool
    installed: bool
    last_tick: datetime | None
    next_tick: datetime
    last_fire: Fire | None
    ticks_waiting: int


async def schedule_rows(store: JobStore, catalog: Catalog) -> list[ScheduleRow]:
    """One row per scheduled job of the catalog, by name."""
    if not isinstance(store, QueryableStore):
        raise KetError("this store cannot list schedules")
    specs = sorted((s for s in catalog.jobs.values() if s.schedule), key=lambda s: s.name)
    now = await store.now()
    states = await store.schedule_get([s.name for s in specs])
    found: list[ScheduleRow] = []
    for spec in specs:
        schedule = spec.schedule
        assert schedule is not None
        state = states.get(spec.name)
        current = state is not None and state.fingerprint == schedule.fingerprint
        fires = await store.schedule_fires(spec.name, 1)
        waiting = 0
        if state is not None and state.paused and current:
            waiting = schedule.count_ticks(state.last_tick, schedule.tick_at(now))
        found.append(
            ScheduleRow(
                job=spec.name,
                schedule=schedule.describe(),
                paused=bool(state and state.paused),
                installed=current,
                last_tick=state.last_tick if state is not None and current else None,
                next_tick=schedule.next_tick(now),
                last_fire=fires[0] if fires else None,
                ticks_waiting=waiting,
            )
        )
    return found


def scheduled_job(catalog: Catalog, name: str) -> JobSpec:
    """The scheduled job `name` of the deployment; KetError naming the scheduled jobs
    otherwise."""
    spec = catalog.jobs.get(name)
    if spec is None or spec.schedule is None:
        known = ", ".join(sorted(n for n, s in catalog.jobs.items() if s.schedule)) or "none"
        raise KetError(f"no scheduled job {name!r} in deployment {catalog.deployment!r} ({known})")
    return spec


async def pause_schedule(
    store: JobStore, catalog: Catalog, name: str, actor: Actor, *, tenant: str, paused: bool
) -> bool:
    """Pause (or resume) the schedule of job `name` in the tenant: a paused schedule fires no
    tick, and counts the ones it passed as skipped at its next fire; True when it changed.
    Recorded as `actor`'s."""
    spec = scheduled_job(catalog, name)
    changed = await _control(store).schedule_pause(spec.name, paused)
    word = "paused" if paused else "resumed"
    entry = AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action="pause" if paused else "resume",
        selection={"schedule": spec.name},
        matched=1,
        changed=int(changed),
        skipped=int(not changed),
        detail=f"schedule {spec.name} {word}"
        if changed
        else f"schedule {spec.name} was already {word}",
    )
    await record(store, entry, tenant=tenant)
    return changed


async def run_schedule_now(
    store: JobStore, catalog: Catalog, name: str, actor: Actor, *, tenant: str
) -> Inserted:
    """Fire the schedule of job `name` once, now, as a tick would; its own ticks go on as
    before. Recorded as `actor`'s enqueue of the job it fired."""
    spec = scheduled_job(catalog, name)
    schedule = spec.schedule
    assert schedule is not None  # scheduled_job's promise
    tick = await store.now()  # the job a tick of now makes: its instant, nothing skipped
    job = catalog.new_job(spec.name, None, tick=tick, ticks_skipped=0)
    inserted = await _control(store).schedule_run_now(spec.name, schedule.fingerprint, job)
    entry = AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action="enqueue",
        job_id=inserted.id,
        selection={"schedule": spec.name},
        matched=1,
        changed=1,
        detail=f"schedule {spec.name} run now: job {inserted.id}",
    )
    await record(store, entry, tenant=tenant)
    return inserted


def _control(store: JobStore) -> ScheduleControl:
    if not isinstance(store, ScheduleControl):
        raise KetError(f"store {type(store).__name__} cannot pause or run schedules")
    return store
