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

Most attempts are a few microseconds of ket around a handler that returns, so the step keeps
their path short: an async handler is awaited in the attempt's own task (the caller's, one per
attempt), the timeout and the abort grace are loop callbacks rather than tasks that wait
(runtime/watch.py), and the context makes its parts when the handler first uses them.

The handler's input is built from the stored payload here, and only here are sealed secrets
opened: a job whose secrets no key opens is discarded at once, naming the job and the field (a
retry could not help; `ket jobs retry` brings it back once the key is restored). The texts of
what the handler raised are redacted before they are stored, logged or reported: the job's secret
values hidden, then the deployment's `redact` hook applied.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ValidationError

from ket.catalog import Catalog, JobSpec, UpgradeFailed
from ket.context.blocking import Blocking
from ket.context.signal import AbortSignal, resolve
from ket.errors import (
    Aborted,
    Discard,
    EffectError,
    MessageRejected,
    PayloadVersionError,
    ResultRejected,
    Retry,
    SecretKeyError,
    Snooze,
)
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks, Kind, attempt_event
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
from ket.runtime.watch import OVERRUN_WARNING_SECONDS, AttemptWatch
from ket.secret import Redact, Redactor
from ket.store.types import ClaimedJob, ErrorInfo, Settle
from ket.store.waiting import timed_by, untimed

log = logging.getLogger("ket.worker")

# How long an async handler may take to wind down after its signal is aborted before it is
# cancelled (and how long shutdown waits for a plain handler's thread before handing it back).
ABORT_GRACE_SECONDS = 2.0
# How long a payload from a newer deployment waits before a worker looks at it again.
NEWER_PAYLOAD_DELAY_SECONDS = 60.0
_MILLISECOND = timedelta(milliseconds=1)
_AGAIN = frozenset(("retryable", "snoozed"))  # outcomes after which the job runs again

_EVENT: dict[str, Kind] = {
    "completed": "completed",
    "failed": "failed",
    "discarded": "discarded",
    "cancelled": "cancelled",
    "handed_back": "handed_back",
    "snoozed": "snoozed",
    "lease_lost": "lease_lost",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """How an attempt ended: the settlement to record (None: lease lost, record nothing)."""

    job: ClaimedJob
    settle: Settle | None
    kind: str  # completed, failed, discarded, cancelled, handed_back, snoozed, lease_lost
    error: str | None = None
    duration_ms: float = 0.0
    waited_ms: float | None = None  # due to start, when someone listens (see JobRunner.run)


@dataclass(frozen=True, slots=True)
class Returned:
    """What a completed handler returned, for its job's result (a job that declares output)."""

    value: object


# How a handler ended: None (it returned: the attempt completed), what it returned when that is
# kept as its job's result (Returned), what it raised (a failure, described once the duration is
# known), or the attempt's result decided otherwise (aborted).
Ended = Result | BaseException | Returned | None


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
        self._clock = contexts.clock
        self._executor = executor
        self.hooks = hooks
        self.tenant = tenant
        self._is_async: dict[str, bool] = {}  # by job name: is its handler `async def`
        self._empty_inputs: dict[str, BaseModel] = {}  # by job name, see _input

    async def run(self, job: ClaimedJob, signal: AbortSignal) -> Result:
        """Run one attempt of `job` under `signal`; never raises for what the handler did.

        An async handler runs in the calling task, which must be the attempt's own (the worker
        runs each attempt in a task; so do the test helpers): a cancel of that task from
        elsewhere raises CancelledError here, the worker's cue for `abandoned()`. With traces
        on (KET_OTEL=1), the attempt runs in its span (ket/trace.py)."""
        if not self.catalog.tracing:
            return await self._attempt(job, signal)
        from ket.trace import attempt_span, record_outcome

        with attempt_span(job, self.tenant) as span:
            result = await self._attempt(job, signal)
            record_outcome(span, result.kind, result.error)
        return result

    async def _attempt(self, job: ClaimedJob, signal: AbortSignal) -> Result:
        started = time.perf_counter()
        spec = self.catalog.jobs.get(job.name)
        if spec is None:  # rows of a job this deployment no longer ships
            reason = f"no job {job.name!r} in deployment {self.catalog.deployment!r}"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        hooks, waited = self.hooks, None
        # the wait goes out on `started` and again on the outcome's event, so that a hook that
        # times waits (metrics) needs one event per attempt, not two
        started_wanted = hooks.wanted("started")
        if started_wanted or hooks.wanted("completed"):
            waited = max((self._clock() - job.run_at) / _MILLISECOND, 0.0)
            if started_wanted:
                hooks.emit(self._event("started", job, waited_ms=waited))
        try:
            payload, secrets = self._input(spec, job)
        except SecretKeyError as error:
            reason = f"job {job.id}: cannot open its secret input: {error.message}"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        except ValidationError as error:
            reason = f"payload does not match the input of {job.name}: {_one_line(error)}"
            if job.payload_version != spec.input_version:
                reason += f" (upgraded from input version {job.payload_version})"
            return _discard(job, safe_text(reason, ERROR_TEXT_MAX), None)
        except PayloadVersionError as error:
            if error.newer:  # a rolling deploy: leave it to a worker of the newer deployment
                return _postponed(job, error.message)
            return _discard(job, safe_text(error.message, ERROR_TEXT_MAX), None)
        except UpgradeFailed as failed:  # a failure like the handler's own
            redact = Redactor.of(failed.secrets, self.catalog.redact)
            return _failed(job, spec, failed.error, redact)
        is_async = self._is_async.get(job.name)
        if is_async is None:
            is_async = self._is_async[job.name] = inspect.iscoroutinefunction(spec.handler)
        ctx = self._contexts.for_job(job, spec, signal)
        if is_async:
            ended = await self._run_async(job, spec, ctx, payload, signal)
        else:
            ended = await self._run_plain(job, spec, ctx, payload, signal)
        duration = round((time.perf_counter() - started) * 1000, 3)
        result = None
        if isinstance(ended, Returned):
            try:
                result = self.catalog.job_result(job.name, ended.value)
                ended = None
            except ResultRejected as error:  # a failure of the handler's, retried as one
                ended = error
        if ended is None:
            settle = Settle(id=job.id, fence=job.fence, outcome="completed", result=result)
            return Result(
                job=job, settle=settle, kind="completed", duration_ms=duration, waited_ms=waited
            )
        if isinstance(ended, BaseException):
            redact = Redactor.of(secrets, self.catalog.redact)
            ended = _failed(job, spec, ended, redact)
        return replace(ended, duration_ms=duration, waited_ms=waited)

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
            job, settle = result.job, result.settle
            retry_at = None
            if applied and settle is not None and settle.outcome in _AGAIN:
                # the store counted the delay from its now a moment ago: this is within that
                # moment of the row's run_at (equal under the test helpers' clock)
                retry_at = self._clock() + timedelta(seconds=settle.delay_seconds)
            event = attempt_event(
                kind,
                self.tenant,
                job.id,
                job.name,
                job.queue,
                job.attempt,
                result.duration_ms,
                result.waited_ms,
                error,
                retry_at,
            )
            self.hooks.emit(event)

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

    def _input(self, spec: JobSpec, job: ClaimedJob) -> tuple[Any, list[str]]:
        """The handler's input and the secret values it held. Many jobs take no input: when
        every instance their input model makes of `{}` is the same immutable value (see
        _one_empty_value), it is validated once and shared."""
        payload = job.payload
        current = job.payload_version == spec.input_version
        if not payload and current:
            empty = self._empty_inputs.get(spec.name)
            if empty is not None:
                return empty, []
        value, secrets = self.catalog.job_input(spec, payload, job.payload_version)
        if not payload and current and _one_empty_value(spec.input_model):
            self._empty_inputs[spec.name] = value
        return value, secrets

    # -- the attempt ------------------------------------------------------------------------

    async def _run_async(
        self, job: ClaimedJob, spec: JobSpec, ctx: Any, payload: Any, signal: AbortSignal
    ) -> Ended:
        """Await the handler in this task. The watch cancels the task once an abort's grace is
        over; that cancel ends the attempt as its signal says, one from elsewhere propagates."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("JobRunner.run must run in a task of its own")
        watch = self._watch(loop, signal, spec, job, task=task)
        watch.start_clock()
        timed = timed_by(watch)  # a wait for room for a connection is not the handler's time
        try:
            value = await spec.handler(ctx, payload)
        except asyncio.CancelledError:
            if not watch.cut and task.cancelling():  # the worker stopped waiting for it
                raise
            # cut off after the grace, or the handler's own CancelledError (an inner task's)
            return _aborted(job, spec, signal)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:
            return _raised(job, spec, signal, error)
        finally:
            untimed(timed)
            watch.close()
        return _returned(job, spec, signal, value)

    async def _run_plain(
        self, job: ClaimedJob, spec: JobSpec, ctx: Any, payload: Any, signal: AbortSignal
    ) -> Ended:
        """Run the handler in a thread of the executor; wait for it, or for an abort's grace."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        watch = self._watch(loop, signal, spec, job, woken=woken)
        blocking = Blocking(ctx, loop)
        handler = spec.handler

        def in_thread() -> Any:
            # an attempt that ended while it waited for a thread must not start now
            signal.throw_if_aborted()
            loop.call_soon_threadsafe(watch.start_clock)  # the clock starts with the handler
            return handler(blocking, payload)

        # in the attempt's context, as an async handler runs: its context variables (the
        # attempt's span, when traced) are the handler's too
        attempt = contextvars.copy_context()
        attempt.run(timed_by, watch)  # a wait for room for a connection is not the handler's time
        work = asyncio.wrap_future(self._executor.submit(attempt.run, in_thread))
        work.add_done_callback(lambda _: resolve(woken))
        try:
            await woken
            if not work.done():  # aborted, and the grace is over
                if signal.reason == "shutdown":  # the process is going: hand the job back
                    _discard_result(work)
                    return _handed_back(job)
                await self._overrun(job, signal, work)
        finally:
            watch.close()
        if work.cancelled():
            return _aborted(job, spec, signal)
        error = work.exception()
        if error is None:
            return _returned(job, spec, signal, work.result())
        return _raised(job, spec, signal, error)

    def _watch(
        self,
        loop: asyncio.AbstractEventLoop,
        signal: AbortSignal,
        spec: JobSpec,
        job: ClaimedJob,
        *,
        task: asyncio.Task[Any] | None = None,
        woken: asyncio.Future[None] | None = None,
    ) -> AttemptWatch:
        return AttemptWatch(
            loop,
            signal,
            timeout=spec.timeout_seconds,
            grace=ABORT_GRACE_SECONDS,  # read at each attempt: tests shorten it
            job=job,
            tenant=self.tenant,
            task=task,
            woken=woken,
        )

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


def _returned(
    job: ClaimedJob, spec: JobSpec, signal: AbortSignal, value: object
) -> Result | BaseException | Returned | None:
    """A handler that returned: completed (or snoozed, when it returned a Snooze), unless a
    cancel or a timeout decided the outcome as it returned (a shutdown that the handler
    finished its work through completes it)."""
    if signal.aborted and signal.reason != "shutdown":
        return _aborted(job, spec, signal)
    if isinstance(value, Snooze):
        return value
    if spec.output_model is None or value is None:
        return None  # nothing to keep
    return Returned(value)


def _raised(
    job: ClaimedJob, spec: JobSpec, signal: AbortSignal, error: BaseException
) -> Result | BaseException:
    """A handler that raised: aborted if its signal was, whatever it raised; else a failure."""
    if signal.aborted or isinstance(error, Aborted):
        return _aborted(job, spec, signal)
    return error


def _one_empty_value(model: type[BaseModel]) -> bool:
    """Whether validating `{}` as `model` always gives equal immutable instances and runs no
    code of the app's: no fields, frozen, no validators, no post-init, no private attributes
    (true of the model a job declared without input gets)."""
    decorators = model.__pydantic_decorators__
    return (
        not model.model_fields
        and bool(model.model_config.get("frozen"))
        and model.__pydantic_post_init__ is None
        and not model.__private_attributes__
        and not (
            decorators.validators
            or decorators.field_validators
            or decorators.root_validators
            or decorators.model_validators
        )
    )


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
    if isinstance(error, Snooze):
        return _snoozed(job, spec, error, redact)
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


def _snoozed(job: ClaimedJob, spec: JobSpec, snooze: Snooze, redact: Redact) -> Result:
    """Put off by its handler: the attempt is given back, the snooze goes in the history."""
    try:
        delay = checked_delay(snooze.seconds, f"Snooze(seconds=...) from {job.name}")
    except BadDelay as problem:  # not a delay anyone can wait: a failure of the attempt
        return _retry_or_discard(job, spec, str(problem), None, None)
    note = f"snoozed for {delay:g} s"
    if snooze.reason is not None:
        note = f"{note}: {redacted(str(snooze.reason), redact, ERROR_TEXT_MAX, 'Snooze')}"
    info = ErrorInfo(error=note, traceback=None)
    settle = Settle(id=job.id, fence=job.fence, outcome="snoozed", delay_seconds=delay, error=info)
    return Result(job=job, settle=settle, kind="snoozed", error=note)


def _postponed(job: ClaimedJob, why: str) -> Result:
    """Handed back for later without spending the attempt (no history entry)."""
    settle = Settle(
        id=job.id, fence=job.fence, outcome="snoozed", delay_seconds=NEWER_PAYLOAD_DELAY_SECONDS
    )
    why = f"{why}; handed back for {NEWER_PAYLOAD_DELAY_SECONDS:g} s"
    return Result(job=job, settle=settle, kind="handed_back", error=safe_text(why, ERROR_TEXT_MAX))


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
