"""The storage contract: the small JobStore protocol, and the capabilities a store may add.

Any store that passes the conformance kit (`ket.tck`) is a valid backend. The core protocol is
the minimum a store must get right to run jobs safely; observation, push wake-ups and enqueue in a
caller's transaction are separate protocols that callers test for with isinstance().
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ket.store.types import (
    ClaimedJob,
    Fire,
    Heartbeat,
    HeartbeatResult,
    Inserted,
    JobClaim,
    JobId,
    JobQuery,
    JobRecord,
    JobStats,
    NewJob,
    Prune,
    Rescued,
    ScheduleState,
    Settle,
    SettleResult,
    StateChange,
    TickClaim,
    TickResult,
)


@runtime_checkable
class JobStore(Protocol):
    """Persist jobs and schedules for one tenant database."""

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs in one round trip; a unique key coalesces with the active job holding it."""
        ...

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        """Claim due jobs in priority, run-at, id order; each gets a lease and a new fence."""
        ...

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        """Apply attempt outcomes in one transaction; a stale fence is refused, not applied."""
        ...

    async def job_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        """Extend the leases still held; report lost leases and requested cancels."""
        ...

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        """Move executing jobs whose lease expired to retryable (or discarded), error recorded."""
        ...

    async def job_cancel(self, job_id: JobId) -> StateChange:
        """Cancel non-terminal work; executing work is marked so its worker aborts it."""
        ...

    async def job_retry(self, job_id: JobId) -> StateChange:
        """Make retryable or discarded work available now, keeping its history."""
        ...

    async def job_prune(self, prune: Prune) -> int:
        """Delete up to `prune.limit` terminal jobs past retention; returns how many."""
        ...

    async def schedule_get(self, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
        """The state rows of these schedules (absent: never installed)."""
        ...

    async def schedule_claim_tick(self, claim: TickClaim) -> TickResult:
        """Compare-and-set a schedule's row; the winner's job and ledger entry commit with it."""
        ...

    async def now(self) -> datetime:
        """The store's time (the database's, or the test clock's)."""
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...


@runtime_checkable
class PushStore(Protocol):
    """Capability: the store wakes idle workers when work may be available (hints only)."""

    async def wait_for_jobs(self, queues: Collection[str], timeout: float) -> bool:
        """Wait up to `timeout` seconds for a wake-up on any of `queues`; False on timeout."""
        ...


@runtime_checkable
class QueryableStore(Protocol):
    """Capability: read access for tools, tests and the dashboard."""

    async def job_get(self, job_id: JobId) -> JobRecord | None:
        """One job in full, or None."""
        ...

    async def job_list(self, query: JobQuery) -> list[JobRecord]:
        """Jobs matching the query, newest first."""
        ...

    async def job_stats(self) -> JobStats:
        """Counts by state and queue, oldest lease age and oldest available age."""
        ...

    async def schedule_fires(self, schedule_id: str, limit: int = 50) -> list[Fire]:
        """The schedule's fire ledger, newest first."""
        ...


class StoreTransaction(Protocol):
    """An open transaction: business writes on `connection`, jobs through `job_insert`."""

    @property
    def connection(self) -> Any:
        """The store-specific connection the caller's own statements run on."""
        ...

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs inside this transaction: they exist if and only if it commits."""
        ...


@runtime_checkable
class TransactionalStore(Protocol):
    """Capability: enqueue inside a transaction shared with the caller's own writes."""

    def transaction(self) -> AbstractAsyncContextManager[StoreTransaction]:
        """Open a transaction; commits on normal exit, rolls back on an exception.

        Wake-ups for the jobs inserted in it are sent only after the commit.
        """
        ...
