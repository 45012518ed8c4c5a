"""The rescuer: jobs whose worker stopped heartbeating go back to work (or are discarded)."""

from __future__ import annotations

from ket.runtime.events import Event, Hooks
from ket.store.contract import JobStore


class RescueService:
    """Moves executing jobs whose lease expired to retryable, discarded or cancelled."""

    name = "rescue"

    def __init__(self, store: JobStore, hooks: Hooks, *, tenant: str, interval: float) -> None:
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self.interval = interval

    async def tick(self) -> None:
        for rescued in await self._store.job_rescue():
            if self._hooks.wanted("rescued"):
                self._hooks.emit(
                    Event(
                        kind="rescued",
                        tenant=self._tenant,
                        job_id=rescued.id,
                        name=rescued.name,
                        queue=rescued.queue,
                        attempt=rescued.attempt,
                        detail=f"now {rescued.state}; lease of {rescued.worker_id} expired",
                    )
                )
