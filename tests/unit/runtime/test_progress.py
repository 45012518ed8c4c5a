"""ctx.progress: a handler says how far it is; the row learns it with the lease's heartbeat, and
listeners at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.runtime.events import Event
from ket.testing import create_test_deployment

threads: list[str] = []


async def import_rows(ctx: Any, input: Any) -> None:
    ctx.progress(0.25)
    ctx.progress(0.5, "half of the rows")


def resize(ctx: Any, input: Any) -> None:  # a plain handler, in a thread of its own
    threads.append(threading.current_thread().name)
    ctx.progress(1, "x" * 500)


async def overshoot(ctx: Any, input: Any) -> None:
    ctx.progress(input.fraction)


APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="shop",
            jobs={
                "import_rows": define_job(idempotent=True, handler=import_rows),
                "resize": define_job(idempotent=True, handler=resize),
                "overshoot": define_job(
                    idempotent=True, max_attempts=1, input={"fraction": "json"}, handler=overshoot
                ),
            },
        )
    ],
)


def test_the_last_report_is_the_job_s_progress_and_each_is_an_event_at_once() -> None:
    with create_test_deployment(APP) as e2e:
        heard: list[Event] = []
        e2e.hooks.subscribe(heard.append, kinds=["progress"])
        job_id = e2e.enqueue("shop.import_rows").id
        assert e2e.drain_jobs() == 1
        assert e2e.job(job_id).progress == {"fraction": 0.5, "note": "half of the rows"}
        assert [(e.job_id, e.progress, e.detail) for e in heard] == [
            (job_id, 0.25, None),
            (job_id, 0.5, "half of the rows"),
        ]


def test_a_plain_handler_reports_from_its_thread_and_a_long_note_is_cut() -> None:
    with create_test_deployment(APP) as e2e:
        heard: list[Event] = []
        e2e.hooks.subscribe(heard.append, kinds=["progress"])
        job_id = e2e.enqueue("shop.resize").id
        assert e2e.drain_jobs() == 1
        progress = e2e.job(job_id).progress
        assert progress is not None and progress["fraction"] == 1.0
        assert len(progress["note"]) == 200 and progress["note"].endswith("\u2026")
        assert threads and threads[-1] != threading.main_thread().name
        assert [e.progress for e in heard] == [1.0]


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (1.5, "ValueError: ctx.progress: fraction must be from 0 to 1, got 1.5"),
        (-0.1, "ValueError: ctx.progress: fraction must be from 0 to 1, got -0.1"),
        (True, "TypeError: ctx.progress: fraction must be a number, got True"),
        ("half", "TypeError: ctx.progress: fraction must be a number, got 'half'"),
    ],
)
def test_a_fraction_outside_0_to_1_fails_the_attempt_naming_it(given: object, error: str) -> None:
    with create_test_deployment(APP) as e2e:
        performed = e2e.perform_job("shop.overshoot", {"fraction": given})
        assert performed.outcome == "discarded"
        assert performed.error is not None and performed.error.startswith(error)
        assert performed.progress is None


def test_perform_job_gives_the_last_report() -> None:
    with create_test_deployment(APP) as e2e:
        performed = e2e.perform_job("shop.import_rows")
        assert performed.progress == {"fraction": 0.5, "note": "half of the rows"}
