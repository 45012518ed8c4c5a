"""What the kit's areas share: building jobs, driving them into a state, reading them back.

Everything here goes through the contract only, so a kit test arranges its world the way a worker
or an operator would, never by writing rows behind the store's back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Collection, Iterable
from datetime import datetime, timedelta
from typing import Any

from ket.store.contract import JobStore, PushStore, QueryableStore, TransactionalStore
from ket.store.types import (
    ClaimedJob,
    ErrorInfo,
    JobClaim,
    JobId,
    JobQuery,
    JobRecord,
    JobState,
    NewJob,
    Outcome,
    Settle,
)
from ket.tck.harness import Tck

LEASE = 30.0
WORKER = "worker-1"
TAKEOVER_WORKER = "worker-2"
# An id no test ever creates: stores number jobs from small integers.
UNKNOWN_ID: JobId = 987_654_321


def new_job(name: str = "kit.job", **fields: Any) -> NewJob:
    """A NewJob with the kit's defaults, `fields` overriding them."""
    return NewJob(name=name, **fields)


def after(t: Tck, seconds: float) -> datetime:
    """The manual clock's now plus `seconds`."""
    return t.clock.now() + timedelta(seconds=seconds)


def fresh_queue(label: str = "q") -> str:
    """A queue name no other job of the test uses."""
    # unique, not merely numbered: NOTIFY reaches every listener of a PostgreSQL database, so a
    # kit run in another process (on another schema of that database) must not meet its names
    return f"kit-{label}-{uuid.uuid4().hex[:16]}"


async def insert(store: JobStore, *jobs: NewJob) -> list[JobId]:
    """Insert `jobs` in one call; every one must be a new row."""
    results = await store.job_insert(list(jobs))
    assert [r.coalesced for r in results] == [False] * len(jobs), results
    return [r.id for r in results]


async def insert_one(store: JobStore, job: NewJob | None = None) -> JobId:
    """Insert one job (a default one if None) as a new row; its id."""
    (job_id,) = await insert(store, job or new_job())
    return job_id


async def claim(
    store: JobStore,
    queue: str = "default",
    *,
    limit: int = 10,
    worker_id: str = WORKER,
    lease: float = LEASE,
) -> list[ClaimedJob]:
    """Claim up to `limit` due jobs of `queue`."""
    return await store.job_claim(
        JobClaim(queue=queue, limit=limit, worker_id=worker_id, lease_seconds=lease)
    )


async def claim_only(
    store: JobStore,
    job_id: JobId,
    queue: str = "default",
    *,
    worker_id: str = WORKER,
    lease: float = LEASE,
) -> ClaimedJob:
    """Claim `queue`, which must hand out exactly the job `job_id`."""
    claimed = await claim(store, queue, limit=10, worker_id=worker_id, lease=lease)
    assert [c.id for c in claimed] == [job_id], claimed
    return claimed[0]


def settlement(
    job: ClaimedJob, outcome: Outcome, *, delay: float = 0.0, error: str | None = None
) -> Settle:
    """The Settle for `job` under the fence it was claimed with."""
    info = ErrorInfo(error=error, traceback=f"Traceback: {error}") if error else None
    return Settle(id=job.id, fence=job.fence, outcome=outcome, delay_seconds=delay, error=info)


async def settle(
    store: JobStore,
    job: ClaimedJob,
    outcome: Outcome,
    *,
    delay: float = 0.0,
    error: str | None = None,
) -> None:
    """Settle `job`, which must be applied."""
    result = await store.job_settle([settlement(job, outcome, delay=delay, error=error)])
    assert (result.applied, result.refused) == ((job.id,), ()), result


async def take_over(t: Tck, job: ClaimedJob, *, store: JobStore | None = None) -> ClaimedJob:
    """Let `job`'s lease expire, rescue it and claim it again: the old fence is now stale."""
    overdue = (job.lease_until - await t.store.now()).total_seconds() + 1
    if overdue > 0:
        t.clock.advance(seconds=overdue)
    rescued = await t.store.job_rescue()
    assert job.id in [r.id for r in rescued], rescued
    again = await claim_only(store or t.store, job.id, job.queue, worker_id=TAKEOVER_WORKER)
    assert again.fence > job.fence, (job.fence, again.fence)
    return again


# mypy refuses a Protocol where type[C] is expected (type-abstract), although isinstance() with a
# runtime-checkable Protocol is exactly what Tck.require does: the kit asks in these three places.


def queryable(t: Tck) -> QueryableStore:
    """The store as a QueryableStore, or the test is skipped visibly."""
    return t.require(QueryableStore)  # type: ignore[type-abstract]


def pushable(t: Tck) -> PushStore:
    """The store as a PushStore, or the test is skipped visibly."""
    return t.require(PushStore)  # type: ignore[type-abstract]


def transactional(t: Tck) -> TransactionalStore:
    """The store as a TransactionalStore, or the test is skipped visibly."""
    return t.require(TransactionalStore)  # type: ignore[type-abstract]


async def get(t: Tck, job_id: JobId) -> JobRecord:
    """The job's full record (the test is skipped when the store cannot be queried)."""
    record = await queryable(t).job_get(job_id)
    assert record is not None, f"job {job_id} does not exist"
    return record


async def records(t: Tck, **query: Any) -> list[JobRecord]:
    """Every job matching `query` (JobQuery fields), newest first."""
    return await queryable(t).job_list(JobQuery(limit=100_000, **query))


async def ids(t: Tck, **query: Any) -> list[JobId]:
    """The ids of every job matching `query`, newest first."""
    return [r.id for r in await records(t, **query)]


async def arrange(t: Tck, state: JobState, *, queue: str | None = None, **fields: Any) -> JobId:
    """A job driven to `state` through the contract alone, in a queue of its own by default.

    retryable: one failed attempt due in an hour; discarded: one attempt, given up with an error;
    cancelled: cancelled while available.
    """
    queue = queue or fresh_queue(state)
    if state == "scheduled":
        fields.setdefault("run_at", after(t, 3_600))
    job_id = await insert_one(t.store, new_job(queue=queue, **fields))
    if state in ("available", "scheduled"):
        return job_id
    if state == "cancelled":
        change = await t.store.job_cancel(job_id)
        assert change.state == "cancelled", change
        return job_id
    claimed = await claim_only(t.store, job_id, queue)
    if state == "retryable":
        await settle(t.store, claimed, "retryable", delay=3_600, error="boom")
    elif state == "discarded":
        await settle(t.store, claimed, "discarded", error="gave up")
    elif state == "completed":
        await settle(t.store, claimed, "completed")
    return job_id


async def assert_no_jobs(t: Tck, queues: Iterable[str] = ("default",)) -> None:
    """Nothing is claimable in `queues` and, when the store can be queried, no job exists."""
    for queue in queues:
        assert await claim(t.store, queue, limit=100) == []
    if isinstance(t.store, QueryableStore):
        assert await t.store.job_list(JobQuery(limit=100)) == []


async def quiet(store: PushStore, queues: Collection[str], *, wait: float = 0.2) -> float:
    """Wait on `queues` until a wait times out with False; how long that wait took.

    Wake-ups may be spurious: a store may wake every waiter once when its listener (re)connects,
    since notifications could have been missed meanwhile. Such wake-ups must stop, though, or idle
    workers would spin: a few tries at most until the store is quiet.
    """
    for _ in range(5):
        started = time.monotonic()
        if not await store.wait_for_jobs(queues, wait):
            return time.monotonic() - started
    raise AssertionError(f"wait_for_jobs({sorted(queues)}, {wait}) never timed out, 5 tries")
