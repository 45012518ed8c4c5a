"""Running one claimed job: validate its input, call its handler, turn the outcome into a Settle."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ket.catalog import JobSpec
from ket.context.blocking import Blocking
from ket.context.signal import AbortSignal
from ket.errors import Aborted, Discard, EffectError, Retry
from ket.store.types import ClaimedJob, ErrorInfo, Settle

# How long an async handler may take to wind down after its signal is aborted before it is
# cancelled; a plain handler's thread cannot be stopped, so its late result is simply ignored.
ABORT_GRACE_SECONDS = 2.0

ContextFactory = Callable[[ClaimedJob, JobSpec, AbortSignal], Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """How an attempt ended: the settlement to store (None: lease lost, store nothing)."""

    settle: Settle | None
    kind: str  # completed, failed, discarded, cancelled, handed_back, lease_lost
    error: str | None = None


async def run_attempt(
    job: ClaimedJob,
    spec: JobSpec,
    signal: AbortSignal,
    make_context: ContextFactory,
    executor: Executor,
) -> Result:
    """Run the handler of `job` under its timeout and signal, and decide the outcome."""
    loop = asyncio.get_running_loop()
    try:
        payload = spec.input_model.model_validate(job.payload)
    except ValidationError as error:
        reason = f"payload does not match the input of {job.name}: {_one_line(error)}"
        return _discard(job, reason, None)
    timer = loop.call_later(spec.timeout_seconds, signal.abort, "timeout")
    try:
        ctx = make_context(job, spec, signal)
        if inspect.iscoroutinefunction(spec.handler):
            work: asyncio.Future[Any] = asyncio.ensure_future(spec.handler(ctx, payload))
        else:
            future = executor.submit(spec.handler, Blocking(ctx, loop), payload)
            work = asyncio.wrap_future(future)
        return await _outcome(job, spec, signal, work)
    finally:
        timer.cancel()


async def _outcome(
    job: ClaimedJob, spec: JobSpec, signal: AbortSignal, work: asyncio.Future[Any]
) -> Result:
    aborted = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait([work, aborted], return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
    if work.done():
        return _finished(job, spec, signal, work)
    # aborted while running: give the handler a moment to notice, then cancel it
    await asyncio.wait([work], timeout=ABORT_GRACE_SECONDS)
    if not work.done():
        work.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.wait([work], timeout=0.1)
        return _aborted(job, spec, signal)
    # a shutdown that the handler finished its work through completes it (handing it back
    # would only run it again); a cancel or a timeout decides the outcome whatever it returned
    return _finished(job, spec, signal, work)


def _finished(
    job: ClaimedJob, spec: JobSpec, signal: AbortSignal, work: asyncio.Future[Any]
) -> Result:
    """The outcome of a handler that ended (returned or raised)."""
    if work.cancelled() or (signal.aborted and signal.reason != "shutdown"):
        # a cancel or a timeout decides the outcome even if the handler returned as it fired
        return _aborted(job, spec, signal)
    error = work.exception()
    if error is None:
        return Result(
            settle=Settle(id=job.id, fence=job.fence, outcome="completed"), kind="completed"
        )
    if isinstance(error, Aborted) or signal.aborted:
        return _aborted(job, spec, signal)
    return _failed(job, spec, error)


def _aborted(job: ClaimedJob, spec: JobSpec, signal: AbortSignal) -> Result:
    reason = signal.reason
    if reason == "cancelled":
        info = ErrorInfo(error="cancelled by an operator while running")
        settle = Settle(id=job.id, fence=job.fence, outcome="cancelled", error=info)
        return Result(settle=settle, kind="cancelled", error=info.error)
    if reason == "shutdown":  # not the job's fault: hand it back, attempt not counted
        settle = Settle(id=job.id, fence=job.fence, outcome="snoozed", delay_seconds=0)
        return Result(settle=settle, kind="handed_back", error="worker shut down")
    if reason == "lease lost":
        return Result(settle=None, kind="lease_lost", error="lease lost")
    message = f"timed out after {spec.timeout_seconds:g}s"
    return _retry_or_discard(job, spec, message, None, None)


def _failed(job: ClaimedJob, spec: JobSpec, error: BaseException) -> Result:
    trace = "".join(traceback.format_exception(error))
    if isinstance(error, Discard):
        return _discard(job, error.reason, trace)
    if isinstance(error, EffectError):  # a declaration bug: retrying cannot help
        return _discard(job, f"EffectError: {error}", trace)
    message = f"{type(error).__name__}: {error}"
    delay = error.in_seconds if isinstance(error, Retry) else None
    return _retry_or_discard(job, spec, message, trace, delay)


def _retry_or_discard(
    job: ClaimedJob, spec: JobSpec, message: str, trace: str | None, delay: float | None
) -> Result:
    info = ErrorInfo(error=message, traceback=trace)
    if job.attempt >= job.max_attempts:
        final = f"{message} (attempt {job.attempt} of {job.max_attempts}: giving up)"
        return _discard(job, final, trace)
    seconds = spec.backoff(job.attempt) if delay is None else delay
    settle = Settle(
        id=job.id, fence=job.fence, outcome="retryable", delay_seconds=max(0.0, seconds), error=info
    )
    return Result(settle=settle, kind="failed", error=message)


def _discard(job: ClaimedJob, reason: str, trace: str | None) -> Result:
    info = ErrorInfo(error=reason, traceback=trace)
    settle = Settle(id=job.id, fence=job.fence, outcome="discarded", error=info)
    return Result(settle=settle, kind="discarded", error=reason)


def _one_line(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "input"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
