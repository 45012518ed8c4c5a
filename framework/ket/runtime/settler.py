"""Recording outcomes: in batches, row by row when a batch fails, never held up by one row.

Outcomes arrive already made safe (runtime/outcome.py), so a batch normally writes in one
statement. When one fails anyway, its rows are written one at a time: the good ones land, and a
row that still cannot be written is discarded with the reason. When even that fails, the
database is away: the rows wait and are tried again, at least every RETRY_AT_MOST_SECONDS, so
that they are recorded within about a second of its return. Meanwhile the heartbeat keeps their
leases (runtime/lease.py, `Attempts.settling`), and this worker's rescuer waits for them
(`recorded`, runtime/rescue.py): a finished job must not be rescued and run again because its
outcome was late. If the database stays away past their leases and another worker rescues the
jobs first, these late outcomes are refused by their fences (`lease_lost`) and the jobs run again.

A write that does not answer within the settler's `timeout` (a connection gone silent under it,
which neither fails nor answers) is abandoned and tried again: its outcomes' leases are kept
meanwhile, so a write stuck for good would keep its jobs executing for good.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from ket.runtime.outcome import ERROR_TEXT_MAX, describe, safe_text
from ket.runtime.runner import Result
from ket.runtime.supervisor import Repeats, Supervisor, TickTimeout, backoff, bounded
from ket.store.contract import JobStore
from ket.store.types import ErrorInfo, Settle, SettleResult

log = logging.getLogger("ket.worker")

SETTLE_BATCH = 500
# While the database is away, outcomes are tried again this often at least (a doubling backoff
# from 0.2 s up to this): a longer pause would leave them unrecorded for that long after it
# returned, while their leases run out. The failures are logged once a minute (Repeats).
RETRY_AT_MOST_SECONDS = 1.0
# How long one write of outcomes may take before it is abandoned (the worker passes a third of
# its lease, the heartbeat's own bound).
WRITE_TIMEOUT_SECONDS = 10.0
# At shutdown, how long the settler may go on trying before leaving what is left to the rescuers.
SHUTDOWN_SECONDS = 10.0


class Settler:
    """Collects the outcomes of one tenant worker and records them (a supervised loop)."""

    name = "settler"

    def __init__(
        self,
        store: JobStore,
        report: Callable[[Result, bool], None],
        supervisor: Supervisor,
        *,
        timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self._store = store
        self._timed = _Timed(store, timeout)
        self._report = report
        self._supervisor = supervisor
        self._arrived: list[Result] = []  # put, not yet taken into a batch
        self._waiting: list[Result] = []  # not written yet: the database was away
        self._closing = False
        self._batch: list[Result] = []  # outcomes being written now
        # a plain list and futures made when waited on, not an asyncio.Queue and Event:
        # those hold five deques, 4 KB a tenant, idle, in a worker of a thousand tenants
        self._ended: asyncio.Future[None] | None = None  # close() waits for run() to end
        self._hurry: asyncio.Future[None] | None = None  # ends a pause before a retry
        self._moved: asyncio.Future[None] | None = None  # `recorded` waits for a round
        self._over = False
        # nothing to record: run() ended (parked), and the next put() keeps it again, so that
        # a thousand idle tenants' settlers hold no task
        self._parked = False

    def put(self, result: Result) -> None:
        """Record `result` soon."""
        self._arrived.append(result)
        if self._parked:
            self._parked = False
            self._supervisor.keep(self.name, self.run)

    async def run(self) -> bool:
        """Record outcomes until `close()` was called and everything is recorded (False), or
        until nothing is left to record for now (True: parked until the next `put`)."""
        failures = 0
        while not (self._closing and not self._waiting and not self._arrived):
            if not self._waiting and not self._arrived:  # and not closing
                self._parked = True
                return True
            self._gather()
            self._batch, self._waiting = self._waiting, []
            try:
                self._waiting = await record(
                    self._timed,  # type: ignore[arg-type]  # only job_settle is used
                    self._batch,
                    self._report,
                    self._supervisor.repeats,
                )
            finally:
                self._batch = []
                _resolve(self._moved)
                self._moved = None
            if self._waiting:
                failures += 1
                await self._pause(backoff(0.2, failures, ceiling=RETRY_AT_MOST_SECONDS))
            elif failures:
                failures = 0
                self._supervisor.repeats.recovered("recording outcomes")
        self._over = True
        _resolve(self._ended)
        return False

    async def close(self, timeout: float = SHUTDOWN_SECONDS) -> None:
        """Record everything queued (trying for `timeout` seconds at most), then stop."""
        self._closing = True
        if self._parked:  # nothing was left to record
            self._over = True
        if self._over:
            return
        self._ended = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(self._ended, timeout)
        except TimeoutError:
            left = len(self._pending())
            log.error(
                "giving up recording %d outcomes at shutdown; their leases will expire and the "
                "jobs will be rescued",
                left,
            )

    async def recorded(self, timeout: float) -> bool:
        """Wait until the outcomes put before this call are recorded (or refused), retrying
        at once if a retry was pending; False if some still wait after `timeout` seconds (the
        database is away). The rescuer calls this first: its rescue must not take a job whose
        outcome waits here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        mine = {_key(r) for r in self._pending()}
        if mine:
            _resolve(self._hurry)  # once: a rescue waiting here must not make retries spin
        while mine and not self._over:
            left = deadline - loop.time()
            if left <= 0:
                return False
            if self._moved is None:
                self._moved = loop.create_future()
            await asyncio.wait({self._moved}, timeout=left)
            mine &= {_key(r) for r in self._pending()}
        return not mine

    def _pending(self) -> list[Result]:
        return [*self._arrived, *self._waiting, *self._batch]

    async def _pause(self, seconds: float) -> None:
        """Wait `seconds` before a retry, or until `recorded` asks for it now."""
        self._hurry = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait({self._hurry}, timeout=seconds)
        finally:
            self._hurry = None

    def _gather(self) -> None:
        room = SETTLE_BATCH - len(self._waiting)
        if room > 0 and self._arrived:
            self._waiting.extend(self._arrived[:room])
            del self._arrived[:room]


class _Timed:
    """`job_settle` of a store, abandoned after `timeout` seconds (TickTimeout)."""

    def __init__(self, store: JobStore, timeout: float) -> None:
        self._store = store
        self._timeout = timeout

    async def job_settle(self, settlements: Sequence[Settle]) -> SettleResult:
        return await bounded(self._store.job_settle(settlements), self._timeout, "recording")


def _key(result: Result) -> tuple[int, int]:
    return (result.job.id, result.job.fence)


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


async def record(
    store: JobStore,
    results: list[Result],
    report: Callable[[Result, bool], None],
    repeats: Repeats,
) -> list[Result]:
    """Record `results` and report each as recorded; returns those that could not be written
    because the store is unreachable (to retry later)."""
    pending = []
    for result in results:
        if result.settle is None:
            report(result, False)
        else:
            pending.append(result)
    if not pending:
        return []
    try:
        outcome = await store.job_settle([r.settle for r in pending if r.settle is not None])
    except TickTimeout as error:  # the database, not a row: no row-by-row round of timeouts
        repeats.failure("recording outcomes", error, level=logging.WARNING)
        return pending
    except Exception as error:
        repeats.failure("recording outcomes", error, level=logging.WARNING)
        return await _one_by_one(store, pending, report, repeats)
    refused = set(outcome.refused)
    for result in pending:
        report(result, result.job.id not in refused)
    return []


async def _one_by_one(
    store: JobStore,
    results: list[Result],
    report: Callable[[Result, bool], None],
    repeats: Repeats,
) -> list[Result]:
    for index, result in enumerate(results):
        assert result.settle is not None
        try:
            outcome = await _settle_one(store, result.settle)
        except Exception as error:
            if isinstance(error, TickTimeout) or not await _discard_instead(
                store, result, error, report
            ):
                repeats.failure("recording outcomes", error, level=logging.WARNING)
                return results[index:]  # the store is away: keep the rest for later
            continue
        report(result, result.job.id not in outcome.refused)
    return []


async def _settle_one(store: JobStore, settle: Settle) -> SettleResult:
    """One row, tried twice: a row is taken for poison only if it fails again a moment later
    (a brief database error must not turn a completion into a discard)."""
    try:
        return await store.job_settle([settle])
    except TickTimeout:
        raise  # the database does not answer: not this row's doing
    except Exception:
        await asyncio.sleep(0.1)
    return await store.job_settle([settle])


async def _discard_instead(
    store: JobStore, result: Result, error: Exception, report: Callable[[Result, bool], None]
) -> bool:
    """Discard a job whose outcome cannot be written, saying why; False if that fails too."""
    settle = result.settle
    assert settle is not None
    reason = safe_text(
        f"its {settle.outcome} outcome could not be recorded ({describe(error)}); discarded",
        ERROR_TEXT_MAX,
    )
    discard = Settle(
        id=settle.id, fence=settle.fence, outcome="discarded", error=ErrorInfo(error=reason)
    )
    try:
        outcome = await store.job_settle([discard])
    except Exception:
        return False
    log.error("job %s (%s): %s", result.job.id, result.job.name, reason)
    replaced = Result(
        job=result.job,
        settle=discard,
        kind="discarded",
        error=reason,
        duration_ms=result.duration_ms,
        waited_ms=result.waited_ms,
    )
    report(replaced, result.job.id not in outcome.refused)
    return True
