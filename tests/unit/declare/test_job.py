"""define_job and define_function: options kept as written, defaults, the effects container."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_function, define_job
from ket.declare import default_backoff_seconds
from ket.errors import DeclarationError

from .location import marked


def handle(ctx: object, input: object) -> None:
    """A handler."""


def test_job_defaults() -> None:
    job = define_job(handler=handle)
    assert job.handler is handle
    assert (job.queue, job.input, job.effects, job.cross_company) == ("default", None, (), False)
    assert (job.idempotent, job.max_attempts, job.timeout_ms, job.priority) == (
        False,
        20,
        300_000,
        0,
    )
    assert (job.backoff, job.schedule) == (None, None)


def test_job_options_are_kept_as_written_for_the_checker() -> None:
    job = define_job(
        handler=handle,
        queue="bad queue",
        idempotent="yes",  # type: ignore[arg-type]
        max_attempts=0,
        timeout_ms=-5,
        priority=1.5,  # type: ignore[arg-type]
        schedule={"every": "1s"},
        effects=["read:nowhere"],
    )
    assert (job.queue, job.idempotent, job.max_attempts, job.timeout_ms, job.priority) == (
        "bad queue",
        "yes",
        0,
        -5,
        1.5,
    )
    assert job.schedule == {"every": "1s"}
    assert job.effects == ("read:nowhere",)


def test_flow_options_default_to_none_and_are_kept_as_written() -> None:
    plain = define_job(handler=handle)
    assert (plain.expires_in, plain.concurrency_limit, plain.rate_limit) == (None, None, None)
    rate = {"limit": 0, "period": "0s", "key": "partner"}
    job = define_job(
        handler=handle,
        expires_in="soon",
        concurrency_limit=0,
        rate_limit=rate,
    )
    assert (job.expires_in, job.concurrency_limit, job.rate_limit) == ("soon", 0, rate)


def test_function_defaults_and_source() -> None:
    fn = define_function(handler=handle)  # function-call
    assert (fn.input, fn.effects, fn.cross_company) == (None, (), False)
    assert fn.source == marked("function-call", __file__)


def test_job_source_is_the_define_job_line() -> None:
    job = define_job(handler=handle)  # job-call
    assert job.source == marked("job-call", __file__)


@pytest.mark.parametrize("effects", [["a"], ("a",)])
def test_effects_list_or_tuple_becomes_a_tuple(effects: Any) -> None:
    assert define_job(handler=handle, effects=effects).effects == ("a",)


@pytest.mark.parametrize("effects", ["read:sales.Order", 42, {"read:sales.Order": True}])
def test_effects_not_a_list_names_file_line_and_value(effects: Any) -> None:
    with pytest.raises(DeclarationError) as raised:
        define_job(handler=handle, effects=effects)  # effects-job
    assert raised.value.message == (
        f"{marked('effects-job', __file__).render()}: effects must be a list of strings such as "
        f"['read:sales.Order'], got {effects!r}"
    )


def test_function_effects_as_a_string_is_refused() -> None:
    with pytest.raises(DeclarationError, match=r"got 'storage:read'"):
        define_function(handler=handle, effects="storage:read")


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 20.0), (2, 40.0), (3, 80.0), (13, 81_920.0), (14, 86_400.0)]
)
def test_default_backoff_doubles_from_ten_seconds_up_to_a_day(attempt: int, seconds: float) -> None:
    assert default_backoff_seconds(attempt) == seconds


def test_default_backoff_is_capped_at_a_day_for_huge_attempts() -> None:
    assert default_backoff_seconds(10_000) == 86_400.0
