"""Every enqueue path says when a job is due the same way: Catalog.new_job turns `run_at` (an
aware datetime, or an ISO-8601 text with an offset) and `run_in` (a delay the store counts from
its own now) into the job to insert, and refuses anything else naming the value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog, EnqueueOptions
from ket.errors import JobRejected


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


MODULE = define_module(name="m", jobs={"ping": define_job(idempotent=True, handler=handler)})
CATALOG = Catalog.build(define_deployment(name="d", modules=[MODULE]))
NINE_IN_PARIS = datetime(2026, 12, 24, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("run_in", "seconds"),
    [
        (timedelta(minutes=5), 300.0),
        (90, 90.0),
        (2.5, 2.5),
        (0, 0.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("2h", 7_200.0),
        ("1d", 86_400.0),
    ],
)
def test_run_in_takes_a_timedelta_a_number_of_seconds_or_a_duration(
    run_in: Any, seconds: float
) -> None:
    job = CATALOG.new_job("m.ping", None, EnqueueOptions(run_in=run_in))
    assert (job.run_at, job.delay_seconds) == (None, seconds)


@pytest.mark.parametrize("text", ["2026-12-24T09:00:00+01:00", "2026-12-24T08:00:00Z"])
def test_run_at_takes_an_iso_8601_time_with_an_offset(text: str) -> None:
    job = CATALOG.new_job("m.ping", None, EnqueueOptions(run_at=text))
    assert job.run_at == NINE_IN_PARIS
    assert job.run_at is not None and job.run_at.utcoffset() is not None
    assert job.delay_seconds == 0.0


def test_run_at_still_takes_an_aware_datetime_as_it_is() -> None:
    assert (
        CATALOG.new_job("m.ping", None, EnqueueOptions(run_at=NINE_IN_PARIS)).run_at
        is NINE_IN_PARIS
    )


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"run_at": datetime(2026, 12, 24, 9, 0)}, "datetime.datetime(2026, 12, 24, 9, 0)"),
        ({"run_at": "2026-12-24T09:00:00"}, "'2026-12-24T09:00:00'"),
        ({"run_at": "2026-12-24"}, "'2026-12-24'"),
        ({"run_at": "tomorrow"}, "'tomorrow'"),
        ({"run_at": 1_798_099_200}, "1798099200"),
        ({"run_in": -5}, "-5"),
        ({"run_in": timedelta(seconds=-1)}, "-1.0 seconds"),
        ({"run_in": "-5m"}, "'-5m'"),
        ({"run_in": "soon"}, "'soon'"),
        ({"run_in": "5 m"}, "'5 m'"),
        ({"run_in": float("nan")}, "nan"),
        ({"run_in": float("inf")}, "inf"),
        ({"run_in": True}, "True"),
        ({"run_in": [5]}, "[5]"),
        ({"run_in": 10**12}, "1000000000000"),
        ({"run_in": "5m", "run_at": "2026-12-24T09:00:00Z"}, "not both"),
    ],
)
def test_a_bad_run_at_or_run_in_is_refused_naming_the_job_and_the_value(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(JobRejected) as refusal:
        CATALOG.new_job("m.ping", None, EnqueueOptions(**options))
    message = str(refusal.value)
    assert "'m.ping'" in message and named in message, message
    assert "\n" not in message


def test_a_zero_delay_with_a_run_at_is_refused_too() -> None:
    # both were given: which one was meant is the caller's to say
    with pytest.raises(JobRejected, match="run_at or run_in, not both"):
        CATALOG.new_job("m.ping", None, EnqueueOptions(run_at=NINE_IN_PARIS, run_in=0))
