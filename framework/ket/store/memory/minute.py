"""The per-minute counts of a memory database (MinuteStore), counted as the SQL stores count
them (ket.store.sql.minute): one count late, from the jobs themselves: the jobs by id, what
failed or finished from the count before last to the last (the memory store's errors have no
ids of their own, and nothing commits late)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from ket.store.memory.row import JobRow
from ket.store.types import (
    EXPIRED,
    MINUTES_KEPT,
    RUNNABLE_STATES,
    TERMINAL_STATES,
    JobMinute,
    JobMinutes,
)


@dataclass
class Minutes:
    """The counted minutes, by (minute, queue), and the two marks of the cursor."""

    rows: dict[tuple[datetime, str], JobMinute] = field(default_factory=dict)
    counted_at: datetime | None = None
    seen_at: datetime | None = None
    counted_job_id: int = 0
    seen_job_id: int = 0

    def record(self, jobs: list[JobRow], last_id: int, now: datetime, every: float) -> bool:
        """Count the jobs with ids in (counted_job_id, seen_job_id] and what failed and
        finished from counted_at to seen_at, if the last count was `every` seconds ago or
        more; True when this call counted. `last_id`: the newest job's id."""
        if self.seen_at is None or self.counted_at is None:  # counting starts from here
            self.counted_at = self.seen_at = now
            self.counted_job_id = self.seen_job_id = last_id
        elif (now - self.seen_at).total_seconds() < every:
            return False
        else:
            self._count(jobs)
            self.counted_at, self.seen_at = self.seen_at, now
            self.counted_job_id, self.seen_job_id = self.seen_job_id, last_id
        self._sample(jobs, now)
        for key in [key for key in self.rows if key[0] < now - MINUTES_KEPT]:
            del self.rows[key]
        return True

    def _count(self, jobs: list[JobRow]) -> None:
        assert self.counted_at is not None and self.seen_at is not None
        since, until = self.counted_at, self.seen_at
        for job in jobs:
            if self.counted_job_id < job.id <= self.seen_job_id:
                self._add(job.enqueued_at, job.queue, enqueued=1)
            finished = job.finished_at if job.state in TERMINAL_STATES else None
            if finished is not None and since <= finished < until:
                self._add(finished, job.queue, **{job.state: 1})
            for error in job.errors:
                retried = error.attempt < job.attempt or job.state not in TERMINAL_STATES
                if since <= error.at < until and error.error != EXPIRED and retried:
                    self._add(error.at, job.queue, failed=1)

    def _sample(self, jobs: list[JobRow], now: datetime) -> None:
        waiting: dict[str, list[datetime]] = {}
        for job in jobs:
            if job.state in RUNNABLE_STATES and job.run_at <= now:
                waiting.setdefault(job.queue, []).append(job.run_at)
        for queue, due in waiting.items():
            oldest = max(0, int((now - min(due)).total_seconds() * 1000))
            key, found = self._row(now, queue)
            self.rows[key] = replace(found, available=len(due), oldest_available_ms=oldest)

    def listing(self, since: datetime, until: datetime) -> JobMinutes:
        """The minutes in [since, until), in minute order, then queue order, and how far the
        counts have come (None before the second count)."""
        minutes = tuple(self.rows[key] for key in sorted(self.rows) if since <= key[0] < until)
        counted = self.counted_at if self.counted_at != self.seen_at else None
        return JobMinutes(minutes=minutes, counted_until=counted)

    def _add(self, at: datetime, queue: str, **counts: int) -> None:
        key, found = self._row(at, queue)
        self.rows[key] = replace(
            found, **{name: getattr(found, name) + n for name, n in counts.items()}
        )

    def _row(self, at: datetime, queue: str) -> tuple[tuple[datetime, str], JobMinute]:
        """The key of the minute of `at` and `queue`, and its row so far (empty if none)."""
        minute = at.replace(second=0, microsecond=0)
        return (minute, queue), self.rows.get((minute, queue)) or JobMinute(
            minute=minute, queue=queue
        )
