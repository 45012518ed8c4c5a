"""The per-job step: whatever a handler does, its outcome is one the store accepts; timeouts
start with the handler and end it; a refused outcome is reported as lease_lost."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, model_validator

from ket import Discard, Retry, Snooze, define_deployment, define_job, define_model, define_module
from ket.catalog import Catalog
from ket.context import AbortSignal
from ket.declare.job import default_backoff_seconds
from ket.errors import Aborted
from ket.runtime import runner as runner_module
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks
from ket.runtime.outcome import MAX_DELAY_SECONDS
from ket.runtime.runner import JobRunner, Result
from ket.store import ManualClock
from ket.store.memory import MemoryStore
from ket.store.types import ClaimedJob, JobClaim, JobRecord
from ket.testing import create_test_deployment
from ket.transport import CaptureSender

LONE_SURROGATE = b"\xff".decode("utf-8", "surrogateescape")
LEASE = 30.0
seen: list[str] = []


class Unreadable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ is broken")


async def surrogate(ctx: Any, input: Any) -> None:
    raise ValueError(f"bad byte {LONE_SURROGATE} in the file")


async def nul(ctx: Any, input: Any) -> None:
    raise ValueError("a NUL \x00 from C")


async def unreadable(ctx: Any, input: Any) -> None:
    raise Unreadable()


async def retry_never(ctx: Any, input: Any) -> None:
    raise Retry(in_seconds=math.inf)


async def retry_far(ctx: Any, input: Any) -> None:
    raise Retry(in_seconds=1e30)


async def fails(ctx: Any, input: Any) -> None:
    raise RuntimeError("boom")


async def ok(ctx: Any, input: Any) -> None:
    pass


async def ignores_signal(ctx: Any, input: Any) -> None:
    await asyncio.sleep(30)


def quick_plain(ctx: Any, input: Any) -> None:
    time.sleep(0.05)


def records_that_it_ran(ctx: Any, input: Any) -> None:
    seen.append("handler ran")


def late_writer(ctx: Any, input: Any) -> None:
    try:
        ctx.signal.sleep(5)  # returns when the timeout aborts the attempt
        time.sleep(0.15)  # past the abort grace: the runner waits for this thread
        try:
            ctx.db.insert("t.Note", {"text": "written after the timeout"})
        except Aborted as error:
            seen.append(f"refused: {error.reason}")
    finally:
        seen.append("thread returned")


async def swallows_its_cancel(ctx: Any, input: Any) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen.append("cancel caught")
    await asyncio.sleep(0.3)  # runs on, past the cancel
    seen.append("handler returned")


async def runs_until_cancelled(ctx: Any, input: Any) -> None:
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        seen.append("handler cancelled")
        raise


class Counted(BaseModel):
    """An input without fields whose validator counts its runs."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="after")
    def count(self) -> Counted:
        seen.append("validated")
        return self


async def takes_counted(ctx: Any, input: Counted) -> None:
    seen.append(type(input).__name__)


def job(handler: Any, **options: Any) -> Any:
    return define_job(idempotent=True, max_attempts=5, handler=handler, **options)


module = define_module(
    name="t",
    models={"Note": define_model({"text": "string"})},
    jobs={
        "surrogate": job(surrogate),
        "nul": job(nul),
        "unreadable": job(unreadable),
        "retry_never": job(retry_never),
        "retry_far": job(retry_far),
        "huge_backoff": job(fails, backoff=lambda attempt: 1e300),
        "nan_backoff": job(fails, backoff=lambda attempt: math.nan),
        "raising_backoff": job(fails, backoff=lambda attempt: 1 / 0),
        "ok": job(ok),
        "ignores_signal": job(ignores_signal, timeout_ms=100),
        "quick_plain": job(quick_plain, timeout_ms=200),
        "late_writer": job(late_writer, timeout_ms=100, effects=["write:t.Note"]),
        "records_that_it_ran": job(records_that_it_ran),
        "swallows_its_cancel": job(swallows_its_cancel, timeout_ms=100),
        "runs_until_cancelled": job(runs_until_cancelled),
        "takes_counted": job(takes_counted, input=Counted),
    },
)
CATALOG = Catalog.build(define_deployment(name="test", modules=[module]))


@dataclass
class Setup:
    clock: ManualClock
    store: MemoryStore
    runner: JobRunner
    executor: ThreadPoolExecutor  # the runner's, for plain handlers
    events: list[Event]

    async def claim(self, name: str, worker: str = "w1") -> ClaimedJob:
        if name:
            await self.store.job_insert([CATALOG.new_job(name)])
        [claimed] = await self.store.job_claim(
            JobClaim(queue="default", limit=1, worker_id=worker, lease_seconds=LEASE)
        )
        return claimed

    async def attempt(self, name: str) -> tuple[Result, JobRecord]:
        """Run one attempt of a new `name` job and record its outcome in the store."""
        claimed = await self.claim(name)
        result = await self.runner.run(claimed, AbortSignal())
        assert result.settle is not None
        settled = await self.store.job_settle([result.settle])
        assert settled.applied == (claimed.id,)
        record = await self.store.job_get(claimed.id)
        assert record is not None
        return result, record

    async def delay_of(self, record: JobRecord) -> float:
        return (record.run_at - await self.store.now()).total_seconds()


Scenario = Callable[[Setup], Awaitable[None]]


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., None]:
    def runner(scenario: Scenario, *, threads: int = 2) -> None:
        seen.clear()

        async def main() -> None:
            clock = ManualClock(datetime(2030, 1, 15, 12, 0, tzinfo=UTC))
            store = MemoryStore(clock=clock)
            await store.record_install(list(CATALOG.models.values()))
            hooks = Hooks()
            events: list[Event] = []
            hooks.subscribe(events.append)
            contexts = Contexts(
                store=store,
                catalog=CATALOG,
                tenant="acme",
                sender=CaptureSender(),
                storage_root=tmp_path,
                hooks=hooks,
            )
            with ThreadPoolExecutor(threads) as executor:
                job_runner = JobRunner(
                    catalog=CATALOG,
                    contexts=contexts,
                    executor=executor,
                    hooks=hooks,
                    tenant="acme",
                )
                try:
                    await scenario(Setup(clock, store, job_runner, executor, events))
                finally:
                    await store.close()

        asyncio.run(main())

    return runner


@pytest.fixture
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """An aborted handler gets 20 ms to wind down, not 2 s."""
    monkeypatch.setattr(runner_module, "ABORT_GRACE_SECONDS", 0.02)


def writable(text: str | None) -> str:
    """`text`, after proving any database could store it."""
    assert text is not None
    assert "\x00" not in text
    text.encode("utf-8")
    return text


def in_default_range(delay: float, attempt: int = 1) -> bool:
    expected = default_backoff_seconds(attempt)
    return 0.9 * expected <= delay <= 1.1 * expected


# -- poison outcomes -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("t.surrogate", "ValueError: bad byte \\udcff in the file"),
        ("t.nul", "ValueError: a NUL \\x00 from C"),
        ("t.unreadable", "Unreadable (its message could not be read: RuntimeError)"),
    ],
)
def test_an_exception_text_no_database_could_store_is_recorded_made_safe(
    run: Callable[..., None], name: str, error: str
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt(name)
        assert result.kind == "failed"
        assert record.state == "retryable"
        [entry] = record.errors
        assert writable(entry.error) == error
        assert "Traceback" in writable(entry.traceback)

    run(scenario)


def test_retry_in_infinite_seconds_falls_back_to_the_backoff_and_says_so(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.retry_never")
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == (
            "Retry: retry in inf seconds; Retry(in_seconds=...) from t.retry_never must be a "
            "finite, non-negative number of seconds, got inf: used the job's backoff"
        )
        assert in_default_range(await s.delay_of(record))

    run(scenario)


def test_retry_in_1e30_seconds_is_clamped_and_stays_retryable(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.retry_far")
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == "Retry: retry in 1e+30 seconds"
        assert await s.delay_of(record) == MAX_DELAY_SECONDS

    run(scenario)


def test_a_backoff_of_1e300_is_clamped(run: Callable[..., None]) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.huge_backoff")
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == "RuntimeError: boom"
        assert await s.delay_of(record) == MAX_DELAY_SECONDS

    run(scenario)


def test_a_nan_backoff_falls_back_to_the_default_and_says_so(run: Callable[..., None]) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.nan_backoff")
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == (
            "RuntimeError: boom; the backoff of t.nan_backoff must be a finite, non-negative "
            "number of seconds, got nan: used the default"
        )
        assert in_default_range(await s.delay_of(record))

    run(scenario)


def test_a_backoff_that_raises_falls_back_to_the_default_and_says_so(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.raising_backoff")
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == (
            "RuntimeError: boom; the backoff of t.raising_backoff raised ZeroDivisionError: "
            "division by zero: used the default"
        )
        assert in_default_range(await s.delay_of(record))

    run(scenario)


# -- timeouts --------------------------------------------------------------------------------


def test_a_timed_out_async_handler_that_ignores_its_signal_fails_retryable(
    run: Callable[..., None], short_grace: None
) -> None:
    async def scenario(s: Setup) -> None:
        started = time.monotonic()
        result, record = await s.attempt("t.ignores_signal")
        assert time.monotonic() - started < 5  # cancelled, not awaited for 30 s
        assert (result.kind, result.error) == ("failed", "timed out after 0.1s")
        assert record.state == "retryable"
        assert record.errors[0].error == "timed out after 0.1s"

    run(scenario)


def test_a_plain_handlers_timeout_starts_when_its_thread_starts(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        release = threading.Event()
        blocker = s.executor.submit(release.wait, 5)  # the only thread is taken
        asyncio.get_running_loop().call_later(0.4, release.set)
        started = time.monotonic()
        result, record = await s.attempt("t.quick_plain")  # 200 ms timeout, runs 50 ms
        assert time.monotonic() - started > 0.35  # it waited longer than its timeout for a thread
        assert blocker.done()
        assert result.kind == "completed"
        assert record.state == "completed"

    run(scenario, threads=1)


def test_a_timed_out_plain_handler_cannot_write_and_the_attempt_waits_for_its_thread(
    run: Callable[..., None], short_grace: None
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.late_writer")
        assert seen == ["refused: timeout", "thread returned"]  # over before run() returned
        assert await s.store.record_select("t.Note") == []
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == "timed out after 0.1s"

    run(scenario)


def test_a_plain_handler_whose_attempt_ended_before_it_got_a_thread_never_runs(
    run: Callable[..., None], short_grace: None
) -> None:
    async def scenario(s: Setup) -> None:
        release = threading.Event()
        s.executor.submit(release.wait, 5)  # the only thread is taken
        loop = asyncio.get_running_loop()
        claimed = await s.claim("t.records_that_it_ran")
        signal = AbortSignal()
        loop.call_later(0.05, signal.abort, "cancelled")
        loop.call_later(0.1, release.set)
        result = await s.runner.run(claimed, signal)
        assert result.kind == "cancelled"
        assert seen == []

    run(scenario, threads=1)


def test_an_async_handler_that_catches_its_cancel_keeps_the_attempt_until_it_returns(
    run: Callable[..., None], short_grace: None, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.swallows_its_cancel")
        assert seen == ["cancel caught", "handler returned"]  # over before run() returned
        assert (result.kind, record.state) == ("failed", "retryable")
        assert record.errors[0].error == "timed out after 0.1s"
        [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert "ignores its abort (timeout) and the cancel that followed" in warning.message

    run(scenario)


def test_a_cancel_of_the_attempts_task_from_outside_ends_the_handler_and_propagates(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        claimed = await s.claim("t.runs_until_cancelled")
        task = asyncio.ensure_future(s.runner.run(claimed, AbortSignal()))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):  # the worker's cue to hand the job back
            await task
        assert seen == ["handler cancelled"]

    run(scenario)


def test_an_input_without_fields_is_still_validated_for_every_attempt(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        for _ in range(2):
            _, record = await s.attempt("t.takes_counted")
            assert record.state == "completed"
        # once at enqueue, once when the attempt builds its input
        assert seen == ["validated", "validated", "Counted"] * 2

    run(scenario)


# -- reporting -------------------------------------------------------------------------------


def test_a_completion_the_store_refused_is_reported_as_lease_lost_never_completed(
    run: Callable[..., None],
) -> None:
    async def scenario(s: Setup) -> None:
        claimed = await s.claim("t.ok")
        result = await s.runner.run(claimed, AbortSignal())
        assert result.kind == "completed" and result.settle is not None
        # meanwhile its lease expired and another worker took the job
        s.clock.advance(seconds=LEASE + 1)
        await s.store.job_rescue()
        await s.claim("", worker="w2")
        settled = await s.store.job_settle([result.settle])
        assert settled.refused == (claimed.id,)
        s.runner.report(result, applied=False)
        assert [(e.kind, e.job_id) for e in s.events] == [
            ("started", claimed.id),
            ("lease_lost", claimed.id),
        ]
        assert s.events[-1].error == (
            "its completed outcome was refused: another worker holds the job now"
        )

    run(scenario)


def test_a_recorded_completion_is_reported_as_completed(run: Callable[..., None]) -> None:
    async def scenario(s: Setup) -> None:
        result, record = await s.attempt("t.ok")
        assert record.state == "completed"
        s.runner.report(result, applied=True)
        assert [e.kind for e in s.events] == ["started", "completed"]
        assert s.events[-1].duration_ms == result.duration_ms

    run(scenario)


async def retries_in_90s(ctx: Any, input: Any) -> None:
    raise Retry(in_seconds=90)


async def snoozes_30s(ctx: Any, input: Any) -> None:
    raise Snooze(30)


async def discards(ctx: Any, input: Any) -> None:
    raise Discard("no recipient")


AGAIN = define_deployment(
    name="again",
    modules=[
        define_module(
            name="a",
            jobs={
                "retries": job(retries_in_90s),
                "snoozes": job(snoozes_30s),
                "discards": job(discards),
                "ok": job(ok),
            },
        )
    ],
)


def test_a_failed_or_snoozed_event_says_when_its_job_runs_again_as_its_row_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with create_test_deployment(AGAIN) as e2e:
        events: list[Event] = []
        e2e.hooks.subscribe(events.append, ["failed", "snoozed", "discarded", "completed"])
        ids = {name: e2e.enqueue(f"a.{name}").id for name in ("retries", "snoozes", "discards")}
        e2e.enqueue("a.ok")
        with caplog.at_level(logging.INFO, logger="ket.jobs"):
            e2e.drain_jobs()
        run_at = {job.id: job.run_at for job in e2e.jobs()}
        by_kind = {event.kind: event for event in events}
        assert sorted(by_kind) == ["completed", "discarded", "failed", "snoozed"]
        failed, snoozed = by_kind["failed"], by_kind["snoozed"]
        assert failed.retry_at == run_at[ids["retries"]] == e2e.clock.now() + timedelta(seconds=90)
        assert snoozed.retry_at == run_at[ids["snoozes"]]
        assert failed.retry_at is not None and failed.retry_at.tzinfo == UTC
        assert (by_kind["completed"].retry_at, by_kind["discarded"].retry_at) == (None, None)
    [logged] = [r for r in caplog.records if getattr(r, "ket", {}).get("kind") == "failed"]
    assert logged.ket["retry_at"] == failed.retry_at.isoformat()  # type: ignore[attr-defined]
