"""The deployment's schedules in one tenant as an operator sees them (`ket schedules list`, the
dashboard): last tick claimed, last fire with its skipped ticks, next tick, a pause."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ket.catalog import Catalog
from ket.errors import KetError
from ket.store.contract import JobStore, QueryableStore
from ket.store.types import Fire


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
