"""The rescuer: jobs whose worker stopped heartbeating go back to work (or are discarded).

A rescue must not take a job whose attempt is over in some worker but whose outcome is not
recorded yet: the job would run again. Two rules keep it from doing so after the database was
away (an outage leaves every worker's outcomes waiting, and their leases may run out meanwhile):

- this worker's own waiting outcomes are recorded first (`Settler.recorded`, within
  RECORD_FIRST_SECONDS; a rescue whose outcomes could not be recorded is skipped until the next);
- a rescuer that could not reach the database either holds its rescues back for one lease from
  the moment it answers again and this worker's own outcomes could be written (`Hold`; a
  database may answer reads and still refuse writes: SQLite on a full disk): it cannot tell a
  worker that died from one that was cut off as it was, and a live one records its outcomes, or
  extends its leases, well within that.

A worker that alone lost the database is rescued from at once by the others, whose rescues never
failed; a lease that ran out while the whole fleet was cut off is rescued a lease after the
database returned, unless its holder recorded or heartbeated first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from ket.runtime.events import Event, Hooks
from ket.store.contract import JobStore

log = logging.getLogger("ket.worker")

# How long a rescue waits for this worker's waiting outcomes to be recorded before it skips.
RECORD_FIRST_SECONDS = 2.0

# The settler's `recorded`: wait up to that many seconds; True when nothing waits any more.
Recorded = Callable[[float], Awaitable[bool]]


class Hold:
    """Whether this worker's rescues wait, after the database was away from it."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._seconds = seconds
        self._clock = clock
        self.was_away = False  # a rescue (or visit) failed: the database did not answer
        self._until = 0.0

    def away(self) -> None:
        """The database did not answer the rescuer."""
        self.was_away = True

    async def left(self, recorded: Recorded | None) -> float:
        """Called once the database answered: the seconds rescues must still wait (0: none).
        After it was away, the hold starts once `recorded` (this worker's outcomes written)
        says so too; until then a whole hold is left."""
        if self.was_away:
            if recorded is not None and not await recorded(RECORD_FIRST_SECONDS):
                return self._seconds  # writes still fail: ask again then
            self.was_away = False
            self._until = self._clock() + self._seconds
        return max(self._until - self._clock(), 0.0)


async def rescue(
    store: JobStore, hooks: Hooks, *, tenant: str, recorded: Recorded | None = None
) -> int | None:
    """Move the executing jobs whose lease expired on; returns how many. With `recorded`, this
    worker's waiting outcomes are recorded first; if they cannot be (the database is away),
    nothing is rescued now: None."""
    if recorded is not None and not await recorded(RECORD_FIRST_SECONDS):
        log.info(
            "tenant %s: rescue put off: outcomes of this worker are still being recorded", tenant
        )
        return None
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

    def __init__(
        self,
        store: JobStore,
        hooks: Hooks,
        *,
        tenant: str,
        interval: float,
        recorded: Recorded | None = None,
        hold: Hold | None = None,
    ) -> None:
        """`recorded`: the worker's settler's (see `rescue`); `hold`: after a failed tick, the
        rescues wait this long once the database answers (default: one `interval`, a lease)."""
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self._recorded = recorded
        self._hold = hold or Hold(interval)
        self.interval = interval

    async def tick(self) -> float | None:
        try:
            if self._hold.was_away:
                await self._store.now()  # raises while the database is still away
            wait = await self._hold.left(self._recorded)
            if wait > 0:
                return wait
            done = await rescue(
                self._store, self._hooks, tenant=self._tenant, recorded=self._recorded
            )
        except Exception:
            self._hold.away()
            raise
        if done is None:  # the outcomes could not be recorded: the database is away
            self._hold.away()
        return None
