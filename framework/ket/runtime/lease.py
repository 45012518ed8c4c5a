"""Keeping leases, and giving attempts up before a lost lease lets another worker in.

`Attempts` is the worker's table of running attempts, each with the time (on this process's
monotonic clock) until which its lease is surely held: the claim's or last heartbeat's *send*
time plus the lease, so a slow answer can only make the estimate early, never late. It also
holds the attempts that are over but whose outcome waits in the settler (`settling`): their
leases are kept too, until the outcome is recorded, or a rescuer would take a finished job (the
database away for a while, the settler retrying) and it would run again.

- `HeartbeatService` extends the leases of every running attempt, and of every settling one,
  every third of a lease, aborts attempts whose lease was lost or whose job an operator
  cancelled, and, while the worker is fenced off, probes the database until it answers. Its
  supervisor retries it at its interval after failures, not later: when the database comes back
  the leases must be extended at once.
- `LeaseGuard` needs no database: when an attempt's lease is within LEASE_SAFETY_MARGIN of
  running out (heartbeats have been failing), it aborts the attempt (reason `lease lost`) and
  pauses claiming, so a worker cut off from the database stops its work before the rescuer on
  another worker may hand the job to someone else. A settling attempt has nothing left to
  abort: its outcome stays in the settler, and is refused by its fence (`lease_lost`) if the
  job was rescued meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ket.context import AbortSignal
from ket.runtime.flag import Flag
from ket.store.contract import JobStore
from ket.store.types import ClaimedJob, Heartbeat, JobId, Lease
from ket.store.waiting import Sent, sending, unsent

if TYPE_CHECKING:
    from ket.runtime.progress import ProgressBoard

log = logging.getLogger("ket.worker")

# An attempt is aborted when less than this share of its lease is left unconfirmed: with the
# default 30 s lease, 7.5 s before it could expire (two heartbeats have failed by then).
LEASE_SAFETY_MARGIN = 0.25


@dataclass(eq=False, slots=True)
class Attempt:
    """One running attempt: its job, its signal, and until when its lease is surely held."""

    job: ClaimedJob
    signal: AbortSignal
    held_until: float
    task: asyncio.Task[None] | None = None
    given_up: bool = False  # the lease guard gave its lease up (logged once)


@dataclass(eq=False)
class Attempts:
    """The running attempts of one tenant worker, by job id."""

    lease_seconds: float
    clock: Callable[[], float] = time.monotonic
    running: dict[JobId, Attempt] = field(default_factory=dict)
    # over, their outcome not recorded yet: their leases are kept (heartbeated) until it is
    settling: dict[JobId, Attempt] = field(default_factory=dict)
    # cleared while heartbeats fail and attempts were given up: queue loops wait on it
    reachable: Flag = field(default_factory=Flag)
    # set while there are attempts, or the database is to be probed: the heartbeat, the lease
    # guard and the vacuumer tick only then, so that an idle tenant costs no timers at all
    watched: Flag = field(default_factory=Flag)
    started: int = 0  # attempts ever added: claims made here (the vacuumer counts them)

    def __post_init__(self) -> None:
        self.reachable.set()

    def add(self, job: ClaimedJob, sent: float) -> Attempt:
        attempt = Attempt(job=job, signal=AbortSignal(), held_until=sent + self.lease_seconds)
        self.running[job.id] = attempt
        self.started += 1
        self.watched.set()
        return attempt

    def remove(self, job_id: JobId) -> None:
        self.running.pop(job_id, None)
        self._unwatch()

    def finish(self, job_id: JobId) -> None:
        """The attempt is over and its outcome goes to the settler: its lease is kept until
        `settled`."""
        attempt = self.running.pop(job_id, None)
        if attempt is not None:
            self.settling[job_id] = attempt
        self._unwatch()

    def settled(self, job_id: JobId) -> None:
        """The attempt's outcome was recorded (or refused): its lease is no longer ours."""
        if self.settling.pop(job_id, None) is not None:
            self._unwatch()

    def _unwatch(self) -> None:
        if not self.running and not self.settling and self.reachable.is_set():
            self.watched.clear()

    def fence_off(self) -> None:
        """Heartbeats failed and attempts were given up: claiming pauses until the database
        answers (the heartbeat probes it meanwhile)."""
        self.reachable.clear()
        self.watched.set()

    def answered(self) -> None:
        """The database answers again: claiming resumes."""
        self.reachable.set()
        self._unwatch()

    def __iter__(self) -> Iterator[Attempt]:
        return iter(list(self.running.values()))

    def __len__(self) -> int:
        return len(self.running)

    def abort(self, job_id: JobId, reason: str) -> None:
        if (attempt := self.running.get(job_id)) is not None:
            attempt.signal.abort(reason)  # type: ignore[arg-type]


class HeartbeatService:
    """Extends the leases of running attempts; aborts the lost and the cancelled."""

    name = "heartbeat"

    def __init__(
        self, store: JobStore, attempts: Attempts, progress: ProgressBoard | None = None
    ) -> None:
        self._store = store
        self._attempts = attempts
        self._progress = progress  # the reports each lease carries, when written
        self.interval = attempts.lease_seconds / 3

    async def tick(self) -> None:
        attempts = self._attempts
        if not attempts.reachable.is_set():
            await self._store.now()  # raises while the database is still away
            log.warning("the database answers again; claiming resumes")
            attempts.answered()
        held = [a for a in attempts if a.signal.reason != "lease lost"]
        held.extend(attempts.settling.values())
        if not held:
            return
        sent = Sent(attempts.clock)  # moved to when its connection was in hand
        board = self._progress
        leases = [
            Lease(
                id=a.job.id,
                fence=a.job.fence,
                progress=None if board is None else board.take(a.job.id),
            )
            for a in held
        ]
        token = sending(sent)
        try:
            result = await self._store.job_heartbeat(
                Heartbeat(leases=leases, lease_seconds=attempts.lease_seconds)
            )
        finally:
            unsent(token)
        extended = set(result.extended)
        for attempt in held:
            if attempt.job.id in extended:
                attempt.held_until = sent.at + attempts.lease_seconds
        for job_id in result.lost:
            attempts.settled(job_id)  # a settling one's outcome will be refused: keep nothing
            attempts.abort(job_id, "lease lost")
        for job_id in result.cancel_requested:
            attempts.abort(job_id, "cancelled")


class LeaseGuard:
    """Aborts attempts whose lease may run out unconfirmed, and pauses claiming meanwhile."""

    name = "lease guard"

    def __init__(self, attempts: Attempts, *, tenant: str) -> None:
        self._attempts = attempts
        self._tenant = tenant
        self.interval = min(1.0, attempts.lease_seconds / 10)

    async def tick(self) -> None:
        attempts = self._attempts
        deadline = attempts.clock() + attempts.lease_seconds * LEASE_SAFETY_MARGIN
        # an attempt aborted for another reason (a plain thread overrunning its timeout) still
        # holds its lease: losing it pauses claiming too
        overdue = [a for a in attempts if a.held_until <= deadline and not a.given_up]
        if not overdue:
            return
        for attempt in overdue:
            attempt.given_up = True
            attempt.signal.abort("lease lost")
        attempts.fence_off()
        log.error(
            "tenant %s: heartbeats are failing; aborted %d running attempt%s (%s) before their "
            "leases run out, and paused claiming until the database answers",
            self._tenant,
            len(overdue),
            "" if len(overdue) == 1 else "s",
            ", ".join(f"job {a.job.id}" for a in overdue[:10]),
        )
