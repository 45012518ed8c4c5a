"""The rescuer: jobs whose worker stopped heartbeating go back to work (or are discarded).

A rescue must not take a job whose attempt is over in some worker but whose outcome is not
recorded yet: the job would run again. After the database was away, every worker's outcomes may
be waiting (in its settler, retried at least every second), and their leases may have run out
meanwhile. Two rules keep a rescue from taking them:

- this worker's own waiting outcomes are recorded first (`Settler.recorded`, within
  RECORD_FIRST_SECONDS; a rescue whose outcomes could not be recorded is skipped until the next);
- a rescuer whose tick failed (the database did not answer, or refused a write) does not
  rescue on its next write: that write is a grace (`Hold`, `JobStore.job_grace`), which makes
  every executing lease last at least one more lease from then, expired ones included, and the
  rescues start at the tick after it. So the grace is measured from the moment writes work
  again, as the database itself saw it; nothing else (a read that answers, an outcome of its
  own recorded) ends the hold: a database may answer reads and still refuse writes (SQLite on a
  full disk), and a rescuer with no outcomes of its own would learn nothing from them. A live
  holder records its outcomes (within a second) or heartbeats its leases (every third of a
  lease) well within the grace; a dead one's jobs are rescued when it runs out. The grace
  writes whenever some lease ends within it, so on a database that still refuses writes it
  fails, and the hold stays.

A worker that alone lost the database is rescued from at once by the others, whose rescues never
failed; a lease that ran out while the whole fleet was cut off is rescued a lease after the
database took writes again, unless its holder recorded or heartbeated first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ket.runtime.events import Event, Hooks
from ket.store.contract import JobStore

log = logging.getLogger("ket.worker")

# How long a rescue waits for this worker's waiting outcomes to be recorded before it skips.
RECORD_FIRST_SECONDS = 2.0

# The settler's `recorded`: wait up to that many seconds; True when nothing waits any more.
Recorded = Callable[[float], Awaitable[bool]]


class Hold:
    """Whether this worker's next rescue must be a grace, after the database was away from it."""

    def __init__(self, seconds: float) -> None:
        if not seconds > 0:
            raise ValueError(f"a hold's seconds must be positive, got {seconds!r}")
        self.seconds = seconds
        self.was_away = False  # a rescue (or visit) failed: the database did not take it

    def away(self) -> None:
        """The database did not answer the rescuer, or refused its write."""
        self.was_away = True

    async def grace(self, store: JobStore, *, tenant: str) -> bool:
        """After the database was away: give every lease `seconds` from now instead of a
        rescue, and True; else False (the rescue may go on). Raises while writes fail."""
        if not self.was_away:
            return False
        lengthened = await store.job_grace(self.seconds)
        self.was_away = False
        if lengthened:
            log.info(
                "tenant %s: the database takes writes again; %d lease%s given %gs before any "
                "rescue, for their workers to record or heartbeat",
                tenant,
                lengthened,
                "" if lengthened == 1 else "s",
                self.seconds,
            )
        else:  # their workers recorded or heartbeated first: no lease needed the time
            log.info("tenant %s: the database takes writes again; no lease ran out", tenant)
        return True


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
        grace its next write gives (default: one `interval`, a lease)."""
        self._store = store
        self._hooks = hooks
        self._tenant = tenant
        self._recorded = recorded
        self._hold = hold or Hold(interval)
        self.interval = interval

    async def tick(self) -> None:
        try:
            if await self._hold.grace(self._store, tenant=self._tenant):
                return  # the rescues start at the next tick, a lease later: when the grace ends
            done = await rescue(
                self._store, self._hooks, tenant=self._tenant, recorded=self._recorded
            )
        except Exception:
            self._hold.away()
            raise
        if done is None:  # the outcomes could not be recorded: the database is away
            self._hold.away()
