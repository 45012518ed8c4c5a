"""The state one memory deployment shares between its store handles."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from ket.store.admission import Start
from ket.store.memory.ledger import SentMessages
from ket.store.memory.minute import Minutes
from ket.store.memory.ready import ReadyQueue
from ket.store.memory.records import RecordTables
from ket.store.memory.row import JobRow
from ket.store.types import (
    ACTIVE_STATES,
    DEBOUNCED_STATES,
    RUNNABLE_STATES,
    AuditRecord,
    DashboardSession,
    Fire,
    Inserted,
    JobId,
    JobState,
    NewJob,
    QueuePause,
    ScheduleState,
)
from ket.wakeup.local import Wakeups


class MemoryDatabase:
    """Jobs, schedule rows, the fire ledger and the wake-ups of one deployment, in memory.

    Every MemoryStore opened on the same database sees the same rows: they act as replicas of one
    deployment. The methods here change rows and keep the indexes in step; callers hold `lock`.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[JobId, JobRow] = {}
        self.schedules: dict[str, ScheduleState] = {}
        self.fires: dict[str, list[Fire]] = {}
        self.wakeups = Wakeups()
        self.sent = SentMessages()
        self.records = RecordTables()  # model rows (RecordStore)
        self.audit: list[AuditRecord] = []  # operators' retries and cancels, oldest first
        self.sessions: dict[str, DashboardSession] = {}  # the dashboard's, by key
        self.queue_pauses: dict[str, QueuePause] = {}  # paused queues, by name
        self.minutes = Minutes()  # the dashboard's per-minute counts (MinuteStore)
        self._last_id: JobId = 0
        # The partial unique index: (name, unique_key) -> the one active job holding it.
        self._unique: dict[tuple[str, str], JobId] = {}
        # (name, window_key) -> the jobs of that window or debounce key, oldest first
        self._windows: dict[tuple[str, str], list[JobId]] = {}
        self._executing: set[JobId] = set()
        self._ready: dict[str, ReadyQueue] = {}
        self._expiring: set[JobId] = set()  # runnable rows that have an expiry
        self.rate_starts: dict[str, list[Start]] = {}  # by queue: starts under rate limits
        self.limited: set[str] = set()  # queues claimed under a concurrency limit

    @property
    def last_id(self) -> JobId:
        """The newest job's id (0 before the first)."""
        return self._last_id

    def insert(
        self,
        job: NewJob,
        payload: str,
        now: datetime,
        *,
        rerun_of: JobId | None = None,
        undo: list[Callable[[], None]] | None = None,
    ) -> Inserted:
        """Add a job (the rerun of job `rerun_of`, if given), or coalesce it with the active job
        holding its unique key, or the earlier job of its window or debounce key (`undo`, a
        transaction's, gets what puts back a job a debounce changed)."""
        key = None if job.unique_key is None else (job.name, job.unique_key)
        if key is not None and key in self._unique:
            return Inserted(id=self._unique[key], coalesced=True)
        run_at = now if job.run_at is None else job.run_at.astimezone(UTC)
        window = None if job.window_key is None else (job.name, job.window_key)
        if window is not None and job.window is not None:
            joined = self._join(self._windows.get(window, ()), job, payload, run_at, now, undo)
            if joined is not None:
                return Inserted(id=joined, coalesced=True)
        self._last_id += 1
        row = JobRow(
            id=self._last_id,
            name=job.name,
            queue=job.queue,
            state="available" if run_at <= now else "scheduled",
            payload=payload,
            payload_version=job.payload_version,
            priority=job.priority,
            max_attempts=job.max_attempts,
            unique_key=job.unique_key,
            company=job.company,
            run_at=run_at,
            enqueued_at=now,
            tick=None if job.tick is None else job.tick.astimezone(UTC),
            ticks_skipped=job.ticks_skipped,
            tags=tuple(job.tags),
            trace_context=dict(job.trace_context) if job.trace_context else None,
            rerun_of=rerun_of,
            expires_at=_expiry(run_at, job.expires_in_seconds),
            concurrency_key=job.concurrency_key,
            rate_key=job.rate_key,
            window_key=job.window_key,
        )
        self.rows[row.id] = row
        if window is not None:
            self._windows.setdefault(window, []).append(row.id)
        self.move(row, row.state)
        return Inserted(id=row.id, coalesced=False)

    def _join(
        self,
        ids: Sequence[JobId],
        job: NewJob,
        payload: str,
        run_at: datetime,
        now: datetime,
        undo: list[Callable[[], None]] | None,
    ) -> JobId | None:
        """The job of the same window key that `job`'s enqueue joins, if any: the newest one
        enqueued within the window in one of its states; for a debounce, the newest one not
        yet started, which takes `job`'s input, options and run time (insert.py's `debounced`)."""
        window = job.window
        assert window is not None
        rows = [row for row in map(self.rows.get, reversed(ids)) if row is not None]
        if not window.debounce:
            since = now - timedelta(seconds=window.seconds)
            held = (r for r in rows if r.enqueued_at > since and r.state in window.states)
            return next((row.id for row in held), None)
        pending = (r for r in rows if r.state in DEBOUNCED_STATES and r.attempt == 0)
        row = next(pending, None)
        if row is None:
            return None
        if window.max_wait_seconds is not None:
            run_at = min(run_at, row.enqueued_at + timedelta(seconds=window.max_wait_seconds))
        if undo is not None:
            undo.append(partial(self._restore, row, {name: getattr(row, name) for name in _TAKEN}))
        row.payload, row.payload_version = payload, job.payload_version
        row.priority, row.max_attempts = job.priority, job.max_attempts
        row.tags = tuple(job.tags)
        row.trace_context = dict(job.trace_context) if job.trace_context else None
        row.concurrency_key, row.rate_key = job.concurrency_key, job.rate_key
        row.run_at, row.expires_at = run_at, _expiry(run_at, job.expires_in_seconds)
        self.move(row, "available" if run_at <= now else "scheduled")
        return row.id

    def _restore(self, row: JobRow, before: dict[str, Any]) -> None:
        """Put back what a debounce changed on `row`, unless it has started since."""
        if row.id in self.rows and row.state in DEBOUNCED_STATES and row.attempt == 0:
            for name, value in before.items():
                setattr(row, name, value)
            self.move(row, row.state)

    def move(self, row: JobRow, state: JobState) -> None:
        """Put a row in `state`, keeping the unique index, executing set and ready queues true.

        Set run_at before moving a row into a runnable state: its ready-queue entry uses it.
        """
        row.state = state
        key = row.key
        if key is not None:
            if state in ACTIVE_STATES:
                self._unique[key] = row.id
            elif self._unique.get(key) == row.id:
                del self._unique[key]
        if state == "executing":
            self._executing.add(row.id)
        else:
            self._executing.discard(row.id)
        if state in RUNNABLE_STATES:
            self._ready.setdefault(row.queue, ReadyQueue()).push(row)
            if row.expires_at is not None:
                self._expiring.add(row.id)
        else:
            self._expiring.discard(row.id)

    def delete(self, job_ids: Sequence[JobId]) -> None:
        """Remove rows (pruned, or inserted by a transaction that rolled back)."""
        for job_id in job_ids:
            row = self.rows.pop(job_id, None)
            if row is None:
                continue
            key = row.key
            if key is not None and self._unique.get(key) == job_id:
                del self._unique[key]
            self._executing.discard(job_id)
            self._expiring.discard(job_id)
            window = None if row.window_key is None else (row.name, row.window_key)
            if window is not None and job_id in self._windows.get(window, ()):
                self._windows[window].remove(job_id)
                if not self._windows[window]:
                    del self._windows[window]

    def holder(self, key: tuple[str, str]) -> JobId | None:
        """The active job holding a unique key, if any."""
        return self._unique.get(key)

    def take_due(self, queue: str, now: datetime, limit: int) -> list[JobRow]:
        """Up to `limit` due runnable rows of `queue`, in (priority, run_at, id) order."""
        ready = self._ready.get(queue)
        return [] if ready is None else ready.take(now, limit, self.rows)

    def expired(self, queue: str, now: datetime, limit: int) -> list[JobRow]:
        """Up to `limit` runnable rows of `queue` whose expiry has passed, soonest first."""
        found = [
            row
            for row in (self.rows[job_id] for job_id in self._expiring)
            if row.queue == queue and row.expires_at is not None and row.expires_at <= now
        ]
        return sorted(found, key=lambda row: (row.expires_at, row.id))[:limit]

    def executing(self) -> list[JobRow]:
        """The rows currently executing, in no particular order."""
        return [self.rows[job_id] for job_id in self._executing]


# what a debounce gives the job it joins (put back when its transaction rolls back)
_TAKEN = (
    *("payload", "payload_version", "priority", "max_attempts", "tags", "trace_context"),
    *("concurrency_key", "rate_key", "run_at", "expires_at", "state"),
)


def _expiry(run_at: datetime, seconds: float | None) -> datetime | None:
    """When a job due at `run_at` expires unstarted (None: never)."""
    return None if seconds is None else run_at + timedelta(seconds=seconds)
