"""The per-job step, shared by the worker and the test helpers: run one claimed job's attempt,
decide its outcome, and report it once the outcome is recorded.

    result = await runner.run(job, signal)      # validate, call the handler, decide
    ...                                         # the caller records result.settle
    runner.report(result, applied=True)         # the lifecycle event, as recorded

An attempt's clock starts when its handler starts running (a plain handler's thread may start a
moment after the claim). Once its signal is aborted, its context refuses every effect call. An
async handler that ignores the signal is cancelled after ABORT_GRACE_SECONDS; a plain handler's
thread cannot be stopped, so the attempt waits for it: its slot and lease stay held, and a
warning names it while it overruns, so it never overlaps its own retry in this process.

The handler's input is built from the stored payload here, and only here are sealed secrets
opened: a job whose secrets no key opens is discarded at once, naming the job and the field (a
retry could not help; `ket jobs retry` brings it back once the key is restored). The texts of
what the handler raised are redacted before they are stored, logged or reported: the job's secret
values hidden, then the deployment's `redact` hook applied.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ket.catalog import Catalog, JobSpec
from ket.context.blocking import Blocking
from ket.context.signal import AbortSignal
from ket.errors import Aborted, Discard, EffectError, MessageRejected, Retry, SecretKeyError
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks, Kind
from ket.runtime.outcome import (
    ERROR_TEXT_MAX,
    BadDelay,
    backoff_delay,
    checked_delay,
    describe,
    redacted,
    safe_text,
    trace_of,
)
from ket.secret import Redact, Redactor
from ket.store.types import ClaimedJob, ErrorInfo, Settle

log = logging.getLogger("ket.worker")

# How long an async handler may take to wind down after its signal is aborted before it is
# cancelled (and how long shutdown waits for a plain handler's thread before handing it back).
ABORT_GRACE_SECONDS = 2.0
# How often a plain handler's thread that ignores its abort is named in a warning.
OVERRUN_WARNING_SECONDS = 30.0

_EVENT: dict[str, Kind] = {
    "completed": "completed",
    "failed": "failed",
    "discarded": "discarded",
    "cancelled": "cancelled",
    "handed_back": "handed_back",
    "lease_lost": "lease_lost",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """How an attempt ended: the settlement to record (None: lease lost, record nothing)."""

    job: ClaimedJob
    settle: Settle | None
    kind: str  # completed, failed, discarded, cancelled, handed_back, lease_lost
    error: str | None = None
    duration_ms: float = 0.0


class JobRunner:
    """Runs attempts of one tenant's jobs and reports their outcomes as lifecycle events."""

    def __init__(
        self,
        *,
        catalog: Catalog,
        contexts: Contexts,
        executor: Executor,
        hooks: Hooks,
        tenant: str,
    ) -> None:
        self.catalog = catalog
        self._contexts = contexts
        self._executor = executor
        self.hooks = hooks
        self.tenant = tenant

    async def run(self, job: ClaimedJob, signal: AbortSignal) -> Result:
        """Run one attempt of `job` under `signal`; never raises for what the handler did."""
        started = time.perf_counter()
        spec = self.catalog.jobs.get(job.name)
        if spec is None:  # rows of a job this deployment no longer ships
            reason = f"no job {job.name!r} in deployment {self.catalog.deployment!r}"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        if self.hooks.wanted("started"):
            self.hooks.emit(self._event("started", job))
        try:
            payload, secrets = self.catalog.job_input(spec, job.payload)
        except SecretKeyError as error:
            reason = f"job {job.id}: cannot open its secret input: {error.message}"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        except ValidationError as error:
            reason = f"payload does not match the input of {job.name}: {_one_line(error)}"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        redact = Redactor.of(secrets, self.catalog.redact)
        result = await self._attempt(job, spec, payload, signal, redact)
        duration = round((time.perf_counter() - started) * 1000, 3)
        return Result(
            job=job,
            settle=result.settle,
            kind=result.kind,
            error=result.error,
            duration_ms=duration,
        )

    def abandoned(self, job: ClaimedJob, signal: AbortSignal) -> Result:
        """The outcome of an attempt the worker stopped waiting for (shutdown)."""
        spec = self.catalog.jobs.get(job.name)
        if spec is None or not signal.aborted or signal.reason == "shutdown":
            return _handed_back(job)
        return _aborted(job, spec, signal)

    def report(self, result: Result, applied: bool) -> None:
        """Emit the attempt's event; an outcome the store refused (a stale fence) is
        `lease_lost`, never what the handler did."""
        kind = _EVENT[result.kind]
        error = result.error
        if not applied and result.settle is not None:
            kind = "lease_lost"
            error = f"its {result.kind} outcome was refused: another worker holds the job now"
        if self.hooks.wanted(kind):
            self.hooks.emit(
                self._event(kind, result.job, duration_ms=result.duration_ms, error=error)
            )

    def _event(self, kind: Kind, job: ClaimedJob, **fields: Any) -> Event:
        return Event(
            kind=kind,
            tenant=self.tenant,
            job_id=job.id,
            name=job.name,
            queue=job.queue,
            attempt=job.attempt,
            **fields,
        )

    # -- the attempt ------------------------------------------------------------------------

    async def _attempt(
        self, job: ClaimedJob, spec: JobSpec, payload: Any, signal: AbortSignal, redact: Redact
    ) -> Result:
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def start_clock() -> None:
            nonlocal timer
            if timer is None:
                timer = loop.call_later(spec.timeout_seconds, signal.abort, "timeout")

        ctx = self._contexts.for_job(job, spec, signal)
        try:
            if inspect.iscoroutinefunction(spec.handler):
                start_clock()
                work: asyncio.Future[Any] = asyncio.ensure_future(spec.handler(ctx, payload))
            else:
                blocking = Blocking(ctx, loop)

                def in_thread() -> Any:
                    # an attempt that ended while it waited for a thread must not start now
                    signal.throw_if_aborted()
                    loop.call_soon_threadsafe(start_clock)  # the clock starts with the handler
                    return spec.handler(blocking, payload)

                work = asyncio.wrap_future(self._executor.submit(in_thread))
            return await self._outcome(job, spec, signal, work, redact)
        finally:
            if timer is not None:
                timer.cancel()

    async def _outcome(
        self,
        job: ClaimedJob,
        spec: JobSpec,
        signal: AbortSignal,
        work: asyncio.Future[Any],
        redact: Redact,
    ) -> Result:
        aborted = asyncio.ensure_future(signal.wait())
        try:
            await asyncio.wait([work, aborted], return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborted.cancel()
        if work.done():
            return _finished(job, spec, signal, work, redact)
        # aborted while running: give the handler a moment to notice
        await asyncio.wait([work], timeout=ABORT_GRACE_SECONDS)
        if work.done():
            return _finished(job, spec, signal, work, redact)
        if not isinstance(work, asyncio.Task):  # a plain handler's thread
            if signal.reason == "shutdown":  # the process is going: hand the job back
                _discard_result(work)
                return _handed_back(job)
            await self._overrun(job, signal, work)
            return _finished(job, spec, signal, work, redact)
        work.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait([work], timeout=0.1)
        _discard_result(work)
        return _aborted(job, spec, signal)

    async def _overrun(
        self, job: ClaimedJob, signal: AbortSignal, work: asyncio.Future[Any]
    ) -> None:
        """Wait for a plain handler's thread that ignores its abort, naming it meanwhile."""
        since = time.monotonic() - ABORT_GRACE_SECONDS
        while not work.done():
            log.warning(
                "job %s (%s) of tenant %s ignores its abort (%s) and has run %.0fs past it; "
                "its thread keeps its slot and lease until it returns",
                job.id,
                job.name,
                self.tenant,
                signal.reason,
                time.monotonic() - since,
            )
            await asyncio.wait([work], timeout=OVERRUN_WARNING_SECONDS)


def _finished(
    job: ClaimedJob,
    spec: JobSpec,
    signal: AbortSignal,
    work: asyncio.Future[Any],
    redact: Redact,
) -> Result:
    """The outcome of a handler that ended (returned or raised)."""
    if work.cancelled() or (signal.aborted and signal.reason != "shutdown"):
        # a cancel or a timeout decides the outcome even if the handler returned as it fired;
        # a shutdown that the handler finished its work through completes it
        _discard_result(work)
        return _aborted(job, spec, signal)
    error = work.exception()
    if error is None:
        return Result(
            job=job,
            settle=Settle(id=job.id, fence=job.fence, outcome="completed"),
            kind="completed",
        )
    if isinstance(error, Aborted) or signal.aborted:
        return _aborted(job, spec, signal)
    return _failed(job, spec, error, redact)


def _aborted(job: ClaimedJob, spec: JobSpec, signal: AbortSignal) -> Result:
    reason = signal.reason
    if reason == "cancelled":
        info = ErrorInfo(error="cancelled by an operator while running")
        settle = Settle(id=job.id, fence=job.fence, outcome="cancelled", error=info)
        return Result(job=job, settle=settle, kind="cancelled", error=info.error)
    if reason == "shutdown":  # not the job's fault: hand it back, attempt not counted
        return _handed_back(job)
    if reason == "lease lost":
        return Result(job=job, settle=None, kind="lease_lost", error="lease lost")
    message = f"timed out after {spec.timeout_seconds:g}s"
    return _retry_or_discard(job, spec, message, None, None)


def _failed(job: ClaimedJob, spec: JobSpec, error: BaseException, redact: Redact) -> Result:
    trace = trace_of(error, redact)
    if isinstance(error, Discard):
        return _discard(job, _reason_of(error, redact), trace)
    if isinstance(error, EffectError):  # a declaration bug: retrying cannot help
        return _discard(job, describe(error, redact), trace)
    if isinstance(error, MessageRejected):  # a message refused for good: so would a retry be
        return _discard(job, describe(error, redact), trace)
    message = describe(error, redact)
    delay = None
    if isinstance(error, Retry):
        try:
            delay = checked_delay(error.in_seconds, f"Retry(in_seconds=...) from {job.name}")
        except BadDelay as problem:
            message = f"{message}; {problem}: used the job's backoff"
    return _retry_or_discard(job, spec, message, trace, delay)


def _retry_or_discard(
    job: ClaimedJob, spec: JobSpec, message: str, trace: str | None, delay: float | None
) -> Result:
    if job.attempt >= job.max_attempts:
        final = f"{message} (attempt {job.attempt} of {job.max_attempts}: giving up)"
        return _discard(job, final, trace)
    if delay is None:
        delay, problem = backoff_delay(spec.backoff, job.attempt, job.name)
        message += problem
    info = ErrorInfo(error=safe_text(message, ERROR_TEXT_MAX + 200), traceback=trace)
    settle = Settle(
        id=job.id, fence=job.fence, outcome="retryable", delay_seconds=delay, error=info
    )
    return Result(job=job, settle=settle, kind="failed", error=info.error)


def _discard(job: ClaimedJob, reason: str, trace: str | None) -> Result:
    info = ErrorInfo(error=safe_text(reason, ERROR_TEXT_MAX + 200), traceback=trace)
    settle = Settle(id=job.id, fence=job.fence, outcome="discarded", error=info)
    return Result(job=job, settle=settle, kind="discarded", error=info.error)


def _handed_back(job: ClaimedJob) -> Result:
    settle = Settle(id=job.id, fence=job.fence, outcome="snoozed", delay_seconds=0)
    return Result(job=job, settle=settle, kind="handed_back", error="worker shut down")


def _reason_of(error: Discard, redact: Redact) -> str:
    try:
        reason = str(error.reason)
    except Exception:
        return describe(error, redact)
    return redacted(reason, redact, ERROR_TEXT_MAX, "Discard")


def _discard_result(work: asyncio.Future[Any]) -> None:
    """Retrieve an ended handler's exception we decided not to use, so asyncio does not log
    "exception was never retrieved"; a still-running one is retrieved when it ends."""
    if work.done():
        if not work.cancelled():
            work.exception()
    else:
        work.add_done_callback(lambda done: None if done.cancelled() else done.exception())


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "input"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
