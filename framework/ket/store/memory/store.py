"""MemoryStore: the job store contract and every capability, in this process's memory."""

from __future__ import annotations

import asyncio
import heapq
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from ket.errors import JobRejected, StoreError
from ket.store import validate
from ket.store.admission import Candidate, Counts, kept_since
from ket.store.clock import Clock, SystemClock, delays_ended
from ket.store.failure import translated
from ket.store.memory import bulk, transition
from ket.store.memory.database import MemoryDatabase
from ket.store.memory.records import MemoryRecords
from ket.store.memory.row import JobRow
from ket.store.memory.transaction import MemoryTransaction
from ket.store.types import (
    DISCARDED_WITHIN,
    EXPIRED,
    RUNNABLE_STATES,
    TERMINAL_STATES,
    AuditEntry,
    AuditQuery,
    AuditRecord,
    BulkApplied,
    BulkBatch,
    BulkCount,
    ClaimedJob,
    ClaimLimits,
    DashboardSession,
    Fire,
    Heartbeat,
    HeartbeatResult,
    Inserted,
    JobClaim,
    JobFilter,
    JobId,
    JobMinutes,
    JobQuery,
    JobRecord,
    JobStats,
    MinuteQuery,
    ModelTable,
    NewJob,
    Prune,
    QueueAges,
    QueuePause,
    Reran,
    Rerun,
    Rescued,
    ScheduleState,
    Settle,
    SettleResult,
    StateChange,
    StepRecord,
    TickClaim,
    TickResult,
    Where,
)
from ket.store.validate import (
    check_claim,
    check_count,
    check_heartbeat,
    check_job_id,
    check_prune,
    check_query,
    check_run_now,
    check_schedule_ids,
    check_settlements,
    check_tick_claim,
    check_timeout,
    encode_payloads,
)
from ket.store.watch import JobWatch


class MemoryStore:
    """A store handle on a MemoryDatabase: JobStore and every capability of the contract.

    Handles on one database act as replicas of one deployment. Each operation runs under the
    database's lock without awaiting, so it is atomic against other tasks and threads.

    Limitation: the memory store has no isolation. Jobs inserted in an open `transaction()` are
    visible to (and claimable by) every handle at once, and vanish if the transaction rolls back;
    only the wake-ups wait for the commit. Model rows written in it behave the same way.

        store = MemoryStore(clock=ManualClock(start))
        [inserted] = await store.job_insert([NewJob(name="send_receipt", payload={"order": 7})])
    """

    def __init__(self, database: MemoryDatabase | None = None, *, clock: Clock | None = None):
        self.database = MemoryDatabase() if database is None else database
        self._clock = SystemClock() if clock is None else clock
        self._closed = False

    # -- JobStore ---------------------------------------------------------------------------

    async def job_insert(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """Insert jobs; a unique key coalesces with the active job holding it."""
        inserted, queues = self._insert(jobs)
        self.database.wakeups.notify(queues)
        return inserted

    async def job_claim(self, claim: JobClaim) -> list[ClaimedJob]:
        """Claim due jobs in priority, run-at, id order; each gets a lease and a new fence."""
        check_claim(claim)
        with self._locked():
            now = self._now()
            for row in self.database.expired(claim.queue, now, claim.limit):
                transition.expire(self.database, row, now)  # paused or not: never to start
            if claim.queue in self.database.queue_pauses:  # its jobs wait for the resume
                return []
            lease_until = _later(now, claim.lease_seconds, "lease_seconds")
            if claim.limits is None:
                rows = self.database.take_due(claim.queue, now, claim.limit)
            else:
                rows = self._admitted(claim, claim.limits, now)
            for row in rows:
                transition.claim(self.database, row, claim.worker_id, now, lease_until)
            return [row.claimed() for row in rows]

    def _admitted(self, claim: JobClaim, limits: ClaimLimits, now: datetime) -> list[JobRow]:
        """The due rows a claim within fleet-wide limits starts (ket.store.admission's rule,
        as the SQL store keeps it); the others go back to wait. Under the lock."""
        database, queue = self.database, claim.queue
        if limits.frees_on_end:
            self.database.limited.add(queue)
        counts = self._counts(queue, limits, now)
        starts = list(counts.starts)
        due = database.take_due(queue, now, len(database.rows))
        admitted = counts.admit(
            [Candidate(r.id, r.name, r.concurrency_key, r.rate_key) for r in due], claim.limit
        )
        chosen = set(admitted.ids)
        for row in due:
            if row.id not in chosen:
                database.move(row, row.state)  # back to wait, in its place
        database.rate_starts[queue] = starts + counts.recorded(admitted)
        if admitted.retry_at is not None:
            self._wake_at(queue, (admitted.retry_at - now).total_seconds())
        return [row for row in due if row.id in chosen]

    def _counts(self, queue: str, limits: ClaimLimits, now: datetime) -> Counts:
        """What runs and what started of `queue` at `now` (under the lock)."""
        database = self.database
        since = kept_since(limits, now)
        starts = [s for s in database.rate_starts.get(queue, []) if s.at > since]
        running = [(row.concurrency_key, 1) for row in database.executing() if row.queue == queue]
        return Counts.read(limits, now, running, starts)

    def _held_back(self, queue: str, limits: ClaimLimits, now: datetime) -> int:
        """How many due jobs of `queue` its limits hold back now (under the lock)."""
        if queue in self.database.queue_pauses:
            return 0
        concurrency, rate, full = self._counts(queue, limits, now).full()
        return sum(
            1
            for row in self.database.rows.values()
            if row.queue == queue
            and row.state in RUNNABLE_STATES
            and row.run_at <= now
            and (row.expires_at is None or row.expires_at > now)
            and (full or row.concurrency_key in concurrency or row.rate_key in rate)
        )

    def _wake_at(self, queue: str, delay: float) -> None:
        """Wake `queue`'s waiters in `delay` seconds (a rate that held a job back frees)."""
        loop = asyncio.get_running_loop()
        loop.call_later(max(delay, 0.0), self.database.wakeups.notify, [queue])

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        """Apply outcomes whose fence is current; refuse the rest and leave their rows alone."""
        check_settlements(settlements)
        applied: list[JobId] = []
        refused: list[JobId] = []
        woken: set[str] = set()
        with self._locked():
            now = self._now()
            run_ats = [_later(now, s.delay_seconds, "delay_seconds") for s in settlements]
            for settle, run_at in zip(settlements, run_ats, strict=True):
                row = self.database.rows.get(settle.id)
                if row is None or row.state != "executing" or row.fence != settle.fence:
                    refused.append(settle.id)
                    continue
                transition.settle(self.database, row, settle, now, run_at)
                applied.append(settle.id)
                if row.queue in self.database.limited:  # a place under a concurrency limit is free
                    woken.add(row.queue)
                if settle.outcome in ("retryable", "snoozed") and settle.delay_seconds == 0:
                    woken.add(row.queue)  # runnable again at once
        self.database.wakeups.notify(woken)
        return SettleResult(applied=tuple(applied), refused=tuple(refused))

    async def job_heartbeat(self, heartbeat: Heartbeat) -> HeartbeatResult:
        """Extend the leases still held; report lost leases and requested cancels."""
        check_heartbeat(heartbeat)
        extended: list[JobId] = []
        lost: list[JobId] = []
        cancels: list[JobId] = []
        with self._locked():
            now = self._now()
            lease_until = _later(now, heartbeat.lease_seconds, "lease_seconds")
            for lease in heartbeat.leases:
                row = self.database.rows.get(lease.id)
                if row is None or row.state != "executing" or row.fence != lease.fence:
                    lost.append(lease.id)
                    continue
                row.lease_until = lease_until
                if lease.progress is not None:
                    row.progress = lease.progress
                extended.append(lease.id)
                if row.cancel_requested:
                    cancels.append(lease.id)
        return HeartbeatResult(
            extended=tuple(extended), lost=tuple(lost), cancel_requested=tuple(cancels)
        )

    async def job_rescue(self, limit: int = 1_000) -> list[Rescued]:
        """Move executing jobs whose lease expired to retryable, discarded or cancelled."""
        check_count("rescue limit", limit, minimum=1)
        with self._locked():
            now = self._now()
            expired = [
                row
                for row in self.database.executing()
                if row.lease_until is not None and row.lease_until < now
            ]
            oldest = heapq.nsmallest(limit, expired, key=lambda row: (row.lease_until, row.id))
            rescued = [transition.rescue(self.database, row, now) for row in oldest]
        # a job rescued to retryable is due now: wake its queue
        self.database.wakeups.notify(
            {r.queue for r in rescued if r.state == "retryable" or r.queue in self.database.limited}
        )
        return rescued

    async def job_grace(self, seconds: float) -> int:
        """Make every executing job's lease last at least `seconds` from now."""
        validate.check_seconds("grace seconds", seconds, positive=True)
        with self._locked():
            until = _later(self._now(), seconds, "grace seconds")
            short = [
                row
                for row in self.database.executing()
                if row.lease_until is not None and row.lease_until < until
            ]
            for row in short:
                row.lease_until = until
        return len(short)

    async def job_cancel(self, job_id: JobId) -> StateChange:
        """Cancel runnable work now; mark executing work so its worker aborts it."""
        check_job_id(job_id)
        with self._locked():
            row = self.database.rows.get(job_id)
            if row is None:
                return transition.unknown(job_id)
            return transition.cancel(self.database, row, self._now())

    async def job_retry(self, job_id: JobId) -> StateChange:
        """Make retryable or discarded work available now, keeping its attempts and history."""
        check_job_id(job_id)
        with self._locked():
            row = self.database.rows.get(job_id)
            if row is None:
                return transition.unknown(job_id)
            change = transition.retry(self.database, row, self._now())
        if change.changed:
            self.database.wakeups.notify([row.queue])
        return change

    async def job_prune(self, prune: Prune) -> int:
        """Delete up to `prune.limit` terminal jobs past retention, oldest first."""
        check_prune(prune)
        with self._locked():
            try:
                cutoff = self._now() - timedelta(seconds=prune.older_than_seconds)
            except OverflowError:
                return 0  # a retention longer than the calendar: nothing is old enough
            old = [
                row
                for row in self.database.rows.values()
                if row.state in prune.states
                and row.finished_at is not None
                and row.finished_at <= cutoff
            ]
            oldest = heapq.nsmallest(prune.limit, old, key=lambda row: (row.finished_at, row.id))
            self.database.delete([row.id for row in oldest])
            return len(oldest)

    async def schedule_get(self, schedule_ids: Sequence[str]) -> dict[str, ScheduleState]:
        """The state rows of these schedules (absent: never installed)."""
        check_schedule_ids(schedule_ids)
        with self._locked():
            states = self.database.schedules
            return {sid: states[sid] for sid in schedule_ids if sid in states}

    async def schedule_claim_tick(self, claim: TickClaim) -> TickResult:
        """Compare-and-set a schedule's row; the winner's job and ledger entry go in with it."""
        payloads = check_tick_claim(claim)  # installing never fires: an install has no job
        job = claim.job
        with self._locked():
            states = self.database.schedules
            current = states.get(claim.schedule_id)
            if not _holds(current, claim.expected):
                return TickResult(won=False)
            states[claim.schedule_id] = ScheduleState(
                schedule_id=claim.schedule_id,
                fingerprint=claim.fingerprint,
                last_tick=claim.tick.astimezone(UTC),
                paused=current is not None and current.paused,
            )
            if job is None:
                return TickResult(won=True)
            now = self._now()
            inserted = self.database.insert(job, payloads[0], now)
            fire = Fire(
                schedule_id=claim.schedule_id,
                fingerprint=claim.fingerprint,
                tick=claim.tick.astimezone(UTC),
                skipped=claim.skipped,
                job_id=inserted.id,
                fired_at=now,
            )
            self.database.fires.setdefault(claim.schedule_id, []).append(fire)
        if not inserted.coalesced and _due(job, now):
            self.database.wakeups.notify([job.queue])
        return TickResult(won=True, job=inserted)

    async def queue_pause(self, queue: str, *, paused_by: str) -> bool:
        """Pause `queue`; True when it was not paused (the first pause's row is kept)."""
        validate.check_queue_pause(queue, paused_by)
        with self._locked():
            if queue in self.database.queue_pauses:
                return False
            self.database.queue_pauses[queue] = QueuePause(
                queue=queue, paused_at=self._now(), paused_by=paused_by
            )
            return True

    async def queue_resume(self, queue: str) -> bool:
        """Resume `queue` and wake its waiters; True when it was paused."""
        validate.check_queue(queue)
        with self._locked():
            resumed = self.database.queue_pauses.pop(queue, None) is not None
        if resumed:
            self.database.wakeups.notify([queue])
        return resumed

    async def queue_pauses(self) -> dict[str, QueuePause]:
        """The paused queues, by name."""
        with self._locked():
            return dict(sorted(self.database.queue_pauses.items()))

    async def minute_record(self, every: float) -> bool:
        """Count since the last count, if that was `every` seconds ago or more (minute.py)."""
        validate.check_seconds("every", every, positive=False)
        with self._locked():
            jobs = list(self.database.rows.values())
            last = self.database.last_id
            return self.database.minutes.record(jobs, last, self._now(), every)

    async def minute_list(self, query: MinuteQuery) -> JobMinutes:
        """The per-minute counts `query` asks for, and how far the counts have come."""
        validate.check_minute_query(query)
        with self._locked():
            until = query.until or self._now() + timedelta(minutes=1)
            return self.database.minutes.listing(query.since, until)

    async def schedule_pause(self, schedule_id: str, paused: bool) -> bool:
        """Pause or resume a schedule for every handle; True when that changed its row."""
        check_schedule_ids([schedule_id])
        with self._locked():
            states = self.database.schedules
            current = states.get(schedule_id)
            if current is None:  # never swept: a row the first sweep installs, still paused
                current = ScheduleState(
                    schedule_id=schedule_id, fingerprint="", last_tick=self._now()
                )
            elif current.paused == bool(paused):
                return False
            states[schedule_id] = replace(current, paused=bool(paused))
            return True

    async def schedule_run_now(self, schedule_id: str, fingerprint: str, job: NewJob) -> Inserted:
        """Insert a schedule's job and its fire now, leaving the schedule's ticks as they were."""
        [payload] = check_run_now(schedule_id, fingerprint, job)
        assert job.tick is not None  # checked
        with self._locked():
            now = self._now()
            inserted = self.database.insert(job, payload, now)
            fire = Fire(
                schedule_id=schedule_id,
                fingerprint=fingerprint,
                tick=job.tick.astimezone(UTC),
                skipped=0,
                job_id=inserted.id,
                fired_at=now,
            )
            self.database.fires.setdefault(schedule_id, []).append(fire)
        if not inserted.coalesced and _due(job, now):
            self.database.wakeups.notify([job.queue])
        return inserted

    async def now(self) -> datetime:
        """The store's time: the clock's, or this machine's."""
        self._check_open()
        return self._now()

    async def close(self) -> None:
        """Close this handle; the database lives on for its other handles."""
        self._closed = True

    # -- PushStore --------------------------------------------------------------------------

    async def wait_for_jobs(self, queues: Collection[str], timeout: float) -> bool:
        """Wait up to `timeout` seconds for a job made available in one of `queues`."""
        woken = await (await self.watch_for_jobs(queues, timeout)).wait()
        self._check_open()  # closed meanwhile: say so rather than report a wake-up
        return woken

    async def watch_for_jobs(self, queues: Collection[str], timeout: float) -> JobWatch:
        """A wait for a job made available in one of `queues`, registered when this returns."""
        check_timeout(timeout)
        self._check_open()
        return self.database.wakeups.watch(queues, timeout)

    # -- QueryableStore ---------------------------------------------------------------------

    async def job_get(self, job_id: JobId) -> JobRecord | None:
        """One job in full, or None."""
        check_job_id(job_id)
        with self._locked():
            row = self.database.rows.get(job_id)
            return None if row is None else row.record(result=True)

    async def job_list(self, query: JobQuery) -> list[JobRecord]:
        """Jobs matching the query, newest first."""
        check_query(query)
        with self._locked():
            matches = (
                row
                for row in reversed(self.database.rows.values())
                if row.selected(query.states, query.queues, query.names, query.tags)
                and (query.unique_key is None or row.unique_key == query.unique_key)
            )
            page: list[JobRecord] = []
            for index, row in enumerate(matches):
                if len(page) >= query.limit:
                    break
                if index >= query.offset:
                    page.append(row.record())
            return page

    async def job_stats(self, limits: Mapping[str, ClaimLimits] | None = None) -> JobStats:
        """Counts by state and queue, the oldest lease's age and the oldest due job's wait;
        with the queues' fleet-wide `limits`, the due jobs each holds back."""
        with self._locked():
            now = self._now()
            limited = {q: self._held_back(q, lim, now) for q, lim in sorted((limits or {}).items())}
            rows = self.database.rows.values()
            counts = Counter((row.state, row.queue) for row in rows)
            leased = [row for row in self.database.executing() if row.attempted_at]
            waiting = [r for r in rows if r.state in RUNNABLE_STATES and r.run_at <= now]
            expired = Counter(
                row.queue
                for row in rows
                if row.state == "discarded" and any(e.error == EXPIRED for e in row.errors)
            )
            since = now - DISCARDED_WITHIN
            recent = Counter(
                row.queue
                for row in rows
                if row.state == "discarded" and row.finished_at and row.finished_at > since
            )
        lease_starts = _oldest(leased, lambda row: row.attempted_at)
        due_since = _oldest(waiting, lambda row: row.run_at)

        def age(oldest: Mapping[str, datetime], queue: str | None = None) -> float | None:
            found = min(oldest.values(), default=None) if queue is None else oldest.get(queue)
            return None if found is None else (now - found).total_seconds()

        return JobStats(
            limited=limited,
            expired=dict(sorted(expired.items())),
            discarded_last_hour=dict(sorted(recent.items())),
            counts=dict(counts),
            oldest_lease_age=age(lease_starts),
            oldest_available_age=age(due_since),
            queue_ages={
                queue: QueueAges(
                    oldest_lease_age=age(lease_starts, queue),
                    oldest_available_age=age(due_since, queue),
                )
                for queue in sorted({*lease_starts, *due_since})
            },
        )

    async def schedule_fires(self, schedule_id: str, limit: int = 50) -> list[Fire]:
        """The schedule's fire ledger, newest first."""
        check_schedule_ids([schedule_id])
        check_count("fire list limit", limit, minimum=0)
        with self._locked():
            ledger = self.database.fires.get(schedule_id, [])
            # Newest tick first, later entries first among equal ticks (a stable sort).
            return sorted(reversed(ledger), key=lambda fire: fire.tick, reverse=True)[:limit]

    # -- BulkStore --------------------------------------------------------------------------

    async def job_bulk_count(self, job_filter: JobFilter, sample: int = 10) -> BulkCount:
        """How many jobs the filter matches, and the first `sample` of them."""
        states = validate.check_filter(job_filter)
        check_count("bulk sample", sample, minimum=0)
        with self._locked():
            return bulk.count(self.database, job_filter, states, sample)

    async def job_bulk_apply(self, batch: BulkBatch) -> BulkApplied:
        """Retry or cancel up to `batch.limit` matching jobs, each as job_retry or job_cancel."""
        states = validate.check_bulk_batch(batch)
        with self._locked():
            applied, woken = bulk.apply(
                self.database, batch.filter, states, batch.limit, self._now()
            )
        self.database.wakeups.notify(woken)
        return applied

    # -- TransactionalStore -----------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[MemoryTransaction]:
        """Insert jobs that are undone if the block raises; wake-ups wait for the commit."""
        self._check_open()
        transaction = MemoryTransaction(self.database, self._insert, self._rows.in_transaction())
        try:
            yield transaction
        except BaseException:
            transaction.rollback()
            raise
        transaction.commit()

    # -- SentLedger -------------------------------------------------------------------------

    async def message_claim(self, key: str, *, stale_after_seconds: float) -> bool:
        """Claim `key`; False if it was sent, or claimed less than `stale_after_seconds` ago."""
        validate.check_message_claim(key, stale_after_seconds)
        with self._locked():
            return self.database.sent.claim(key, self._now(), stale_after_seconds)

    async def message_confirm(self, key: str) -> None:
        """Record that the message with `key` was sent."""
        validate.check_message_key(key)
        with self._locked():
            self.database.sent.confirm(key, self._now())

    async def message_release(self, key: str) -> None:
        """Give up a claim that did not end in a send (a sent message stays recorded)."""
        validate.check_message_key(key)
        with self._locked():
            self.database.sent.release(key)

    async def message_sent(self, key: str) -> bool:
        """Whether the message with `key` was confirmed sent."""
        validate.check_message_key(key)
        with self._locked():
            return self.database.sent.was_sent(key)

    # -- AuditLog ---------------------------------------------------------------------------

    async def audit_append(self, entry: AuditEntry) -> AuditRecord:
        """Record an operator's action at the store's now."""
        selection = validate.check_audit_entry(entry)
        with self._locked():
            # kept as the SQL store keeps it: the selection as JSON read back
            record = AuditRecord(
                id=len(self.database.audit) + 1,
                at=self._now(),
                entry=replace(entry, selection=json.loads(selection)),
            )
            self.database.audit.append(record)
            return record

    async def audit_list(self, query: AuditQuery) -> list[AuditRecord]:
        """A page of the audit log, newest first."""
        validate.check_audit_query(query)
        with self._locked():
            newest_first = [
                record
                for record in reversed(self.database.audit)
                if query.job_id is None or record.entry.job_id == query.job_id
            ]
        return newest_first[query.offset : query.offset + query.limit]

    # -- SessionStore -------------------------------------------------------------------------

    async def session_open(self, session: DashboardSession, *, ttl_seconds: float) -> None:
        """Keep `session` until `ttl_seconds` after the store's now."""
        validate.check_session(session, ttl_seconds)
        now = self._now()
        with self._locked():
            kept = self.database.sessions
            for key in [k for k, s in kept.items() if s.expires_at and s.expires_at <= now]:
                del kept[key]
            expires = now + timedelta(seconds=ttl_seconds)
            kept[session.key] = replace(session, expires_at=expires)

    async def session_find(self, key: str) -> DashboardSession | None:
        """The live session with `key`, if any."""
        validate.check_session_key(key)
        now = self._now()
        with self._locked():
            found = self.database.sessions.get(key)
        if found is None or found.expires_at is None or found.expires_at <= now:
            return None
        return found

    async def session_close(self, key: str) -> None:
        """End the session with `key`."""
        validate.check_session_key(key)
        with self._locked():
            self.database.sessions.pop(key, None)

    # -- StepStore ----------------------------------------------------------------------------

    async def job_steps(self, job_id: JobId) -> dict[str, str]:
        """The steps of `job_id` recorded so far: name -> the JSON text of its value."""
        check_job_id(job_id)
        with self._locked():
            row = self.database.rows.get(job_id)
            return {} if row is None else dict(row.steps)

    async def job_step_record(self, step: StepRecord) -> bool:
        """Record `step` if its fence still holds the executing job; False otherwise."""
        validate.check_step(step)
        with self._locked():
            row = self.database.rows.get(step.id)
            if row is None or row.state != "executing" or row.fence != step.fence:
                return False
            if step.name in row.steps:
                return False
            row.steps[step.name] = step.value
            return True

    # -- RerunStore ---------------------------------------------------------------------------

    async def job_rerun(self, rerun: Rerun) -> Reran:
        """Insert a finished job's rerun, linked to it; refused when it has not finished."""
        [payload] = validate.check_rerun(rerun)
        with self._locked():
            origin = self.database.rows.get(rerun.origin)
            if origin is None:
                return Reran(origin=rerun.origin, state=None, inserted=None, reason="no such job")
            state = origin.state
            if state not in TERMINAL_STATES:
                reason = validate.not_finished(state)
                return Reran(origin=rerun.origin, state=state, inserted=None, reason=reason)
            now = self._now()
            [job] = delays_ended([rerun.job], now)
            inserted = self.database.insert(job, payload, now, rerun_of=rerun.origin)
        if not inserted.coalesced and _due(job, now):
            self.database.wakeups.notify({job.queue})
        return Reran(origin=rerun.origin, state=state, inserted=inserted)

    async def job_reruns(self, job_id: JobId) -> list[JobId]:
        """The ids of the jobs that rerun `job_id`, oldest first."""
        validate.check_job_id(job_id)
        with self._locked():
            return sorted(row.id for row in self.database.rows.values() if row.rerun_of == job_id)

    # -- RecordStore (model rows; see records.py) --------------------------------------------

    @cached_property
    def _rows(self) -> MemoryRecords:
        # this handle's installed models, over the rows every handle of the database shares
        return MemoryRecords(self.database, self._check_open)

    async def record_install(self, models: Sequence[ModelTable]) -> None:
        """Create the tables of these models (idempotent; new fields read as None in old rows)."""
        self._rows.install(models)

    async def record_insert(self, model: str, values: Mapping[str, Any]) -> str:
        """Insert a row; its new id."""
        return await self._rows.record_insert(model, values)

    async def record_get(self, model: str, record_id: str) -> dict[str, Any] | None:
        """The row with that id, or None."""
        return await self._rows.record_get(model, record_id)

    async def record_select(
        self, model: str, where: Where | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Rows matching `where`, oldest first, at most `limit`."""
        return await self._rows.record_select(model, where, limit)

    async def record_update(self, model: str, where: Where, values: Mapping[str, Any]) -> int:
        """Set `values` on the matching rows; how many matched."""
        return await self._rows.record_update(model, where, values)

    async def record_delete(self, model: str, where: Where) -> int:
        """Delete the matching rows; how many."""
        return await self._rows.record_delete(model, where)

    # -- inside -----------------------------------------------------------------------------

    def _insert(
        self, jobs: Sequence[NewJob], undo: list[Callable[[], None]] | None = None
    ) -> tuple[list[Inserted], set[str]]:
        """Insert (validated first, all or nothing); also the queues that have new due work.
        `undo` (a transaction's) gets what puts back a job a debounce changed."""
        self._check_open()
        payloads = encode_payloads(jobs)
        with self._locked():
            now = self._now()
            jobs = delays_ended(jobs, now)
            inserted = [
                self.database.insert(job, payload, now, undo=undo)
                for job, payload in zip(jobs, payloads, strict=True)
            ]
        queues = {
            job.queue
            for job, result in zip(jobs, inserted, strict=True)
            if not result.coalesced and _due(job, now)
        }
        return inserted, queues

    def _now(self) -> datetime:
        return self._clock.now().astimezone(UTC)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("store is closed")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the database's lock; anything but a StoreError escaping it is raised as one."""
        self._check_open()
        with self.database.lock, translated():
            yield


def _later(now: datetime, seconds: float, field: str) -> datetime:
    try:
        return now + timedelta(seconds=seconds)
    except OverflowError:
        raise JobRejected(f"{field} is too far in the future, got {seconds!r}") from None


def _due(job: NewJob, now: datetime) -> bool:
    return job.run_at is None or job.run_at <= now


def _holds(current: ScheduleState | None, expected: ScheduleState | None) -> bool:
    if expected is None or current is None:
        return expected is None and current is None
    return (current.fingerprint, current.last_tick) == (expected.fingerprint, expected.last_tick)


def _oldest(
    rows: Sequence[JobRow], when: Callable[[JobRow], datetime | None]
) -> dict[str, datetime]:
    """Queue -> the earliest `when` of its rows."""
    found: dict[str, datetime] = {}
    for row in rows:
        instant = when(row)
        if instant is not None and (row.queue not in found or instant < found[row.queue]):
            found[row.queue] = instant
    return found
