"""A job as the memory store keeps it: a mutable record, copied into frozen rows on the way out."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from ket.store.types import ClaimedJob, ErrorRecord, JobId, JobRecord, JobState


@dataclass(kw_only=True, slots=True)
class JobRow:
    """One job's columns; only the database mutates it, under its lock, and never hands it out.

    The payload stays the JSON text `encode_payloads` produced, so every row handed out decodes
    a fresh dict: a caller mutating its payload can never change the stored job.
    """

    id: JobId
    name: str
    queue: str
    state: JobState
    payload: str
    payload_version: int
    priority: int
    max_attempts: int
    unique_key: str | None
    company: str | None
    run_at: datetime
    enqueued_at: datetime
    tick: datetime | None
    ticks_skipped: int | None
    tags: tuple[str, ...] = ()
    trace_context: dict[str, str] | None = None
    rerun_of: JobId | None = None
    expires_at: datetime | None = None
    concurrency_key: str | None = None
    rate_key: str | None = None
    window_key: str | None = None
    attempt: int = 0
    fence: int = 0
    attempted_at: datetime | None = None
    finished_at: datetime | None = None
    worker_id: str | None = None
    lease_until: datetime | None = None
    cancel_requested: bool = False
    errors: list[ErrorRecord] = field(default_factory=list)
    result: str | None = None  # a completion's result, as stored (JSON text)
    progress: str | None = None  # what its handler last reported, as stored (JSON text)
    steps: dict[str, str] = field(default_factory=dict)  # its durable steps (StepStore)
    # Bumped each time the row enters a ready queue: older queue entries for it are stale.
    token: int = 0

    def selected(
        self,
        states: Collection[str],
        queues: Collection[str],
        names: Collection[str],
        tags: Collection[str],
    ) -> bool:
        """Whether a listing's or a bulk filter's selection takes this job: it has one of the
        `states`, one of the `queues`, one of the `names` and carries one of the `tags`, each
        filter that is given (an empty one takes every job)."""
        return (
            (not states or self.state in states)
            and (not queues or self.queue in queues)
            and (not names or self.name in names)
            and (not tags or any(tag in tags for tag in self.tags))
        )

    @property
    def key(self) -> tuple[str, str] | None:
        """The (name, unique_key) this job holds while active, if it has a key."""
        return None if self.unique_key is None else (self.name, self.unique_key)

    def record_error(
        self, error: str, traceback: str | None, at: datetime, *, ran: bool = True
    ) -> None:
        """Append an entry to the history, numbered with the current attempt; `ran`: the
        attempt ran (it names when it started and the worker that ran it)."""
        self.errors.append(
            ErrorRecord(
                attempt=self.attempt,
                at=at,
                error=error,
                traceback=traceback,
                started_at=self.attempted_at if ran else None,
                worker_id=self.worker_id if ran else None,
            )
        )

    def claimed(self) -> ClaimedJob:
        """The frozen view a worker runs the job from."""
        if self.lease_until is None:
            raise AssertionError(f"job {self.id} was handed out as claimed without a lease")
        return ClaimedJob(
            id=self.id,
            name=self.name,
            queue=self.queue,
            payload=json.loads(self.payload),
            payload_version=self.payload_version,
            priority=self.priority,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            unique_key=self.unique_key,
            company=self.company,
            run_at=self.run_at,
            enqueued_at=self.enqueued_at,
            lease_until=self.lease_until,
            fence=self.fence,
            tick=self.tick,
            ticks_skipped=self.ticks_skipped,
            trace_context=_copy(self.trace_context),
        )

    def record(self, *, result: bool = False) -> JobRecord:
        """The frozen view of every column, for tools and tests; with `result`, its result too
        (job_get: a listing leaves it out)."""
        return JobRecord(
            id=self.id,
            name=self.name,
            queue=self.queue,
            state=self.state,
            payload=json.loads(self.payload),
            payload_version=self.payload_version,
            priority=self.priority,
            attempt=self.attempt,
            max_attempts=self.max_attempts,
            unique_key=self.unique_key,
            company=self.company,
            run_at=self.run_at,
            enqueued_at=self.enqueued_at,
            attempted_at=self.attempted_at,
            finished_at=self.finished_at,
            worker_id=self.worker_id,
            lease_until=self.lease_until,
            fence=self.fence,
            cancel_requested=self.cancel_requested,
            errors=tuple(self.errors),
            tick=self.tick,
            ticks_skipped=self.ticks_skipped,
            tags=self.tags,
            trace_context=_copy(self.trace_context),
            rerun_of=self.rerun_of,
            expires_at=self.expires_at,
            window_key=self.window_key,
            result=None if not result or self.result is None else json.loads(self.result),
            progress=None if self.progress is None else json.loads(self.progress),
        )


def _copy(carrier: dict[str, str] | None) -> dict[str, str] | None:
    return None if carrier is None else dict(carrier)
