"""The rescuer: jobs whose worker stopped heartbeating go back to work (or are discarded)."""

from __future__ import annotations

from ket.runtime.events import Event, Hooks
from ket.store.contract import JobStore


async def rescue(store: JobStore, hooks: Hooks, *, tenant: str) -> int:
    """Move the executing jobs whose lease expired on; returns how many."""
    rescued = await store.job_rescue()
    if hooks.wanted("rescued"):
        for job in rescued:
            hooks.emit(
                Event(
                    kind="rescued",
                    tenant=tenant,
                    job_id=job.id,
                    name=job.name,
                    queue=job.queue,
                    attempt=job.attempt,
                    detail=f"now {job.state}; lease of {job.worker_id} expired",
                )
            )
    return len(rescued)


class RescueService:
    """Moves executing jobs whose lease expired to retryable, discarded or cancelled."""

    name = "rescue"

    def __init__(self, store: JobStore, hooks: Hooks, *, tenant: str, interval: float) -> None:
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self.interval = interval

    async def tick(self) -> None:
        await rescue(self._store, self._hooks, tenant=self._tenant)
