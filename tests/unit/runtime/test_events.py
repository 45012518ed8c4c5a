"""Lifecycle hooks: a hook that takes some kinds gets only those, and the kinds nobody takes are
not built; a `started` event says how long its job waited since it was due."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.context import AbortSignal
from ket.runtime.contexts import Contexts
from ket.runtime.events import Event, Hooks, attempt_event
from ket.runtime.runner import JobRunner
from ket.store import JobClaim, ManualClock, NewJob
from ket.store.memory import MemoryStore
from ket.transport import CaptureSender


async def noop(ctx: Any, input: Any) -> None:
    return None


CATALOG = Catalog.build(
    define_deployment(
        name="t",
        modules=[define_module(name="t", jobs={"work": define_job(idempotent=True, handler=noop)})],
        worker={"queues": {"default": 1}},
    )
)


@pytest.fixture(autouse=True)
def quiet_jobs_logger() -> Any:
    """An event is wanted when `ket.jobs` logs its kind: log none, so that hooks alone decide."""
    logger = logging.getLogger("ket.jobs")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def test_a_hook_for_some_kinds_gets_only_those_and_no_other_kind_is_wanted() -> None:
    hooks = Hooks()
    seen: list[str] = []
    assert not hooks.wanted("started")
    hooks.subscribe(lambda event: seen.append(event.kind), ["started", "completed"])
    assert (hooks.wanted("started"), hooks.wanted("completed")) == (True, True)
    assert (hooks.wanted("enqueued"), hooks.wanted("rescued")) == (False, False)
    for kind in ("enqueued", "started", "completed", "rescued"):
        hooks.emit(Event(kind=kind, tenant="acme"))
    assert seen == ["started", "completed"]


def test_a_hook_for_every_kind_wants_them_all_until_it_unsubscribes() -> None:
    hooks = Hooks()
    some = hooks.subscribe(lambda event: None, ["started"])
    every = hooks.subscribe(lambda event: None)
    assert hooks.wanted("enqueued") and hooks.wanted("started")
    every()
    assert hooks.wanted("started") and not hooks.wanted("enqueued")
    some()
    assert not hooks.wanted("started")


def test_the_started_event_says_how_long_the_job_waited_since_it_was_due(tmp_path: Path) -> None:
    async def main() -> list[Event]:
        clock = ManualClock(datetime(2030, 1, 15, 12, 0, tzinfo=UTC))
        store = MemoryStore(clock=clock)
        hooks = Hooks()
        events: list[Event] = []
        hooks.subscribe(events.append, ["started"])
        contexts = Contexts(
            store=store,
            catalog=CATALOG,
            tenant="acme",
            sender=CaptureSender(),
            storage_root=tmp_path,
            clock=clock.now,
        )
        await store.job_insert([NewJob(name="t.work")])
        clock.advance(seconds=2.5)
        [job] = await store.job_claim(
            JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
        )
        with ThreadPoolExecutor(1) as executor:
            runner = JobRunner(
                catalog=CATALOG, contexts=contexts, executor=executor, hooks=hooks, tenant="acme"
            )
            await asyncio.ensure_future(runner.run(job, AbortSignal()))
        await store.close()
        return events

    [started] = asyncio.run(main())
    assert (started.kind, started.name, started.queue) == ("started", "t.work", "default")
    assert started.waited_ms == 2_500.0


def test_an_attempt_event_built_from_a_tuple_has_each_value_in_its_field() -> None:
    built = attempt_event("failed", "acme", 7, "t.work", "mail", 2, 1.5, 30.0, "boom")
    assert built == Event(
        kind="failed",
        tenant="acme",
        job_id=7,
        name="t.work",
        queue="mail",
        attempt=2,
        duration_ms=1.5,
        waited_ms=30.0,
        error="boom",
    )
    assert (built.skipped, built.detail) == (None, None)
