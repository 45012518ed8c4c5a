"""A job's attempts, as the job page lists them: each failed attempt from its error entry (when
it started, how long it took, the worker that ran it, its error), and the job's latest attempt
when no entry ended it (it completed, or runs now)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ket.store.types import EXPIRED, JobRecord


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptRow:
    """One attempt: its number, when it started and how long it took (None where the store did
    not record it: before migration 12, or a job that expired unstarted), the worker that ran
    it, how it ended, and whether it runs still."""

    number: int
    started_at: datetime | None
    seconds: float | None
    worker_id: str | None
    outcome: str
    running: bool = False


def attempts(job: JobRecord, now: datetime) -> list[AttemptRow]:
    """The attempts of `job`, oldest first."""
    rows = [
        AttemptRow(
            number=e.attempt,
            started_at=e.started_at,
            seconds=None if e.started_at is None else (e.at - e.started_at).total_seconds(),
            worker_id=e.worker_id,
            outcome="expired unstarted" if e.error == EXPIRED else e.error,
        )
        for e in job.errors
    ]
    last = job.attempted_at
    ended = any(e.attempt == job.attempt and e.started_at == last for e in job.errors)
    if last is None or job.attempt == 0 or ended:
        return rows
    running = job.state == "executing"
    end = now if running else job.finished_at
    rows.append(
        AttemptRow(
            number=job.attempt,
            started_at=last,
            seconds=None if end is None else (end - last).total_seconds(),
            worker_id=job.worker_id,
            outcome="running" if running else job.state,
            running=running,
        )
    )
    return rows
