"""Flow checks: expiry, concurrency and rate limits of jobs and queues, uniqueness windows and
debounces, and the keys of limits, windows and debounces."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_job
from ket.check import CODES, CheckMessage, Level, run_checks
from ket.check.code import PAUSE_HINT
from ket.declare import DeploymentDecl, JobDecl

from .build import deployment_of, error, handle, warning

INPUT = {"customer_id": "id", "partner": "string", "lines": "json", "token": "secret"}


def limited(**options: Any) -> JobDecl:
    return define_job(handler=handle, idempotent=True, input=INPUT, **options)


def shop(job: JobDecl, worker: dict[str, Any] | None = None) -> DeploymentDecl:
    return deployment_of(jobs={"sync": job}, worker=worker)


def with_hint(code: str, msg: str, hint: str, *, obj: str, job: JobDecl) -> CheckMessage:
    return CheckMessage(
        id=code, level=CODES[code].level, msg=msg, hint=hint, obj=obj, source=job.source
    )


def test_well_formed_flow_options_are_silent() -> None:
    job = limited(
        expires_in="10m",
        concurrency_limit={"limit": 1, "key": ["customer_id"]},
        rate_limit={"limit": 10, "period": "1m", "key": ["partner", "customer_id"]},
    )
    worker = {
        "queues": {
            "default": {"concurrency": 4, "concurrency_limit": 10},
            "partners": {"concurrency": 2, "rate_limit": {"limit": 100, "period": "1m"}},
        }
    }
    assert run_checks(shop(job, worker)) == []
    assert run_checks(shop(limited(concurrency_limit=3))) == []


# KET701: expires_in is not a duration


@pytest.mark.parametrize("value", ["0m", "10 minutes", "1w", 600])
def test_expires_in_that_is_no_duration_is_KET701(value: Any) -> None:
    job = limited(expires_in=value)
    assert run_checks(shop(job)) == [
        error(
            "KET701",
            f"expires_in must be a duration '<count><s|m|h|d>' such as '10m', got {value!r}",
            obj="job sales.sync",
            source=job.source,
        )
    ]


def test_expires_in_past_a_year_is_KET701() -> None:
    job = limited(expires_in="400d")
    assert run_checks(shop(job)) == [
        error(
            "KET701",
            "expires_in must be at most 365d, got '400d'",
            obj="job sales.sync",
            source=job.source,
        )
    ]


# KET707: expires_in within poll_max_ms


@pytest.mark.parametrize("value", ["1s", "2s"])
def test_expires_in_within_poll_max_ms_is_the_warning_KET707(value: str) -> None:
    job = limited(expires_in=value)
    assert run_checks(shop(job)) == [
        warning(
            "KET707",
            f"expires_in {value!r} is within the worker's poll_max_ms (2000 ms): a job whose "
            "wake-up is lost may expire before a poll sees it",
            obj="job sales.sync",
            source=job.source,
        )
    ]


def test_expires_in_past_a_lowered_poll_max_ms_is_silent() -> None:
    job = limited(expires_in="1s")
    assert run_checks(shop(job, {"queues": {"default": 1}, "poll_max_ms": 500})) == []
    assert run_checks(shop(limited(expires_in="3s"))) == []


# KET702: concurrency_limit is malformed


@pytest.mark.parametrize(
    ("value", "msg"),
    [
        (-1, "concurrency_limit: limit must be a whole number from 1 to 2147483647, got -1"),
        (
            "3",
            "concurrency_limit must be a whole number such as 3, or a dict such as "
            "{'limit': 1, 'key': ['customer_id']}, got '3'",
        ),
        (
            {"limit": 1, "key": "customer_id"},
            "concurrency_limit: key must be a list of input field names such as "
            "['customer_id'], got 'customer_id'",
        ),
        (
            {"limit": 1, "keys": ["customer_id"]},
            "concurrency_limit: unknown key 'keys'; its keys are 'limit' and 'key'",
        ),
    ],
    ids=["negative", "text", "key-text", "unknown-key"],
)
def test_malformed_concurrency_limit_is_KET702(value: Any, msg: str) -> None:
    job = limited(concurrency_limit=value)
    assert run_checks(shop(job)) == [error("KET702", msg, obj="job sales.sync", source=job.source)]


@pytest.mark.parametrize("value", [0, {"limit": 0, "key": ["customer_id"]}])
def test_a_concurrency_limit_of_0_is_KET702_with_the_hint_to_pause(value: Any) -> None:
    job = limited(concurrency_limit=value)
    assert run_checks(shop(job)) == [
        with_hint(
            "KET702",
            "concurrency_limit: limit must be a whole number from 1 to 2147483647, got 0",
            PAUSE_HINT,
            obj="job sales.sync",
            job=job,
        )
    ]
    assert "ket queues pause" in PAUSE_HINT


# KET703: rate_limit is malformed


@pytest.mark.parametrize(
    ("value", "msg"),
    [
        (20, "rate_limit must be a dict such as {'limit': 20, 'period': '1s'}, got 20"),
        ({"limit": 20}, "rate_limit: 'period' is required, got {'limit': 20}"),
        (
            {"limit": 20, "period": "0s"},
            "rate_limit: period must be a duration '<count><s|m|h|d>' such as '1s' or '1m', "
            "got '0s'",
        ),
        ({"limit": 20, "period": "7d"}, "rate_limit: period must be at most 1d, got '7d'"),
        (
            {"limit": 1.5, "period": "1s"},
            "rate_limit: limit must be a whole number from 1 to 2147483647, got 1.5",
        ),
    ],
    ids=["number", "no-period", "zero-period", "week", "fraction"],
)
def test_malformed_rate_limit_is_KET703(value: Any, msg: str) -> None:
    job = limited(rate_limit=value)
    assert run_checks(shop(job)) == [error("KET703", msg, obj="job sales.sync", source=job.source)]


def test_a_rate_limit_of_0_is_KET703_with_the_hint_to_pause() -> None:
    job = limited(rate_limit={"limit": 0, "period": "1m"})
    assert run_checks(shop(job)) == [
        with_hint(
            "KET703",
            "rate_limit: limit must be a whole number from 1 to 2147483647, got 0",
            PAUSE_HINT,
            obj="job sales.sync",
            job=job,
        )
    ]


# KET704: key names a field the input lacks


def test_a_key_field_the_input_lacks_is_KET704_suggesting_the_closest() -> None:
    job = limited(concurrency_limit={"limit": 1, "key": ["custmer_id"]})
    assert run_checks(shop(job)) == [
        with_hint(
            "KET704",
            "concurrency_limit key field 'custmer_id' is not a field of the input "
            "(fields: customer_id, partner, lines, token)",
            "Write 'customer_id', the input field closest to 'custmer_id', or add "
            "'custmer_id' to the job's input.",
            obj="job sales.sync",
            job=job,
        )
    ]


def test_a_key_field_like_no_input_field_is_KET704_with_the_catalogued_hint() -> None:
    job = define_job(
        handler=handle, idempotent=True, rate_limit={"limit": 1, "period": "1s", "key": ["x"]}
    )
    assert run_checks(shop(job)) == [
        error(
            "KET704",
            "rate_limit key field 'x' is not a field of the input (fields: none)",
            obj="job sales.sync",
            source=job.source,
        )
    ]


def test_keys_are_not_checked_on_an_input_that_does_not_compile() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input={"a": "uuid"},
        concurrency_limit={"limit": 1, "key": ["b"]},
    )
    assert [m.id for m in run_checks(shop(job))] == ["KET501"]


# KET705: key field is not a scalar


def test_json_and_secret_key_fields_are_KET705_one_each() -> None:
    job = limited(rate_limit={"limit": 5, "period": "1s", "key": ["lines", "token"]})
    assert run_checks(shop(job)) == [
        error(
            "KET705",
            "rate_limit key field 'lines' is json, not a scalar type",
            obj="job sales.sync",
            source=job.source,
        ),
        error(
            "KET705",
            "rate_limit key field 'token' is secret, not a scalar type",
            obj="job sales.sync",
            source=job.source,
        ),
    ]


class BatchInput(BaseModel):
    customer_id: str
    order_ids: list[str]


def test_a_list_field_of_a_pydantic_input_is_KET705() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input=BatchInput,
        concurrency_limit={"limit": 1, "key": ["customer_id", "order_ids"]},
    )
    assert run_checks(shop(job)) == [
        error(
            "KET705",
            "concurrency_limit key field 'order_ids' is list[str], not a scalar type",
            obj="job sales.sync",
            source=job.source,
        )
    ]


# KET706: invalid queue limits


def test_a_keyed_queue_limit_is_KET706_on_the_deployment() -> None:
    worker = {
        "queues": {
            "default": {"concurrency": 2, "concurrency_limit": {"limit": 1, "key": ["customer_id"]}}
        }
    }
    deployment = deployment_of(worker=worker)
    assert run_checks(deployment) == [
        error(
            "KET706",
            "queue 'default': concurrency_limit: a queue's limit takes no key (the queue's jobs "
            "have different inputs), got {'limit': 1, 'key': ['customer_id']}",
            obj="deployment shop",
            source=deployment.source,
        )
    ]


def test_every_bad_queue_is_its_own_KET706_and_a_0_hints_at_a_pause() -> None:
    worker = {
        "queues": {
            "default": {"concurrency": 2, "rate_limit": {"limit": 0, "period": "1s"}},
            "mail": {"concurrency": 2, "concurency_limit": 3},
        }
    }
    deployment = deployment_of(worker=worker)
    assert run_checks(deployment) == [
        CheckMessage(
            id="KET706",
            level=Level.ERROR,
            msg="queue 'default': rate_limit: limit must be a whole number from 1 to "
            "2147483647, got 0",
            hint=PAUSE_HINT,
            obj="deployment shop",
            source=deployment.source,
        ),
        error(
            "KET706",
            "queue 'mail': unknown key 'concurency_limit'; a queue's keys are 'concurrency', "
            "'concurrency_limit' and 'rate_limit'",
            obj="deployment shop",
            source=deployment.source,
        ),
    ]


def test_queue_limits_and_other_worker_problems_are_reported_apart() -> None:
    worker = {"queues": {"default": {"concurrency": 0, "concurrency_limit": 0}}}
    deployment = deployment_of(worker=worker)
    assert [(m.id, m.msg) for m in run_checks(deployment)] == [
        ("KET402", "queues.default: Input should be greater than 0, got 0"),
        (
            "KET706",
            "queue 'default': concurrency_limit: limit must be a whole number from 1 to "
            "2147483647, got 0",
        ),
    ]


# unique and debounce: well formed


def test_well_formed_unique_and_debounce_are_silent() -> None:
    unique = {"period": "1h", "key": ["customer_id", "partner"], "states": ["available"]}
    assert run_checks(shop(limited(unique=unique))) == []
    assert run_checks(shop(limited(unique={"period": "7d"}))) == []
    debounce = {"period": "30s", "key": ["partner"], "max_wait": "30s"}
    assert run_checks(shop(limited(debounce=debounce))) == []
    assert run_checks(shop(limited(debounce={"period": "365d"}))) == []


# KET708: unique is malformed


@pytest.mark.parametrize(
    ("value", "msg"),
    [
        (
            "1h",
            "unique must be a dict such as {'period': '1h', 'key': ['customer_id']}, got '1h'",
        ),
        ({"key": ["customer_id"]}, "unique: 'period' is required, got {'key': ['customer_id']}"),
        (
            {"period": "1h", "within": "1d"},
            "unique: unknown key 'within'; its keys are 'period', 'key' and 'states'",
        ),
        (
            {"period": "an hour"},
            "unique: period must be a duration '<count><s|m|h|d>' such as '30s' or '1h', "
            "got 'an hour'",
        ),
        ({"period": "400d"}, "unique: period must be at most 365d, got '400d'"),
        (
            {"period": "1h", "key": []},
            "unique: key must name at least one input field (leave it out to key the job as a "
            "whole), got []",
        ),
        (
            {"period": "1h", "states": ["active"]},
            "unique: 'active' is not a job state; the states are 'available', 'scheduled', "
            "'executing', 'retryable', 'completed', 'discarded' and 'cancelled'",
        ),
        (
            {"period": "1h", "states": ["completed", "completed"]},
            "unique: states names 'completed' twice, got ['completed', 'completed']",
        ),
        (
            {"period": "1h", "states": []},
            "unique: states must be a list of job states such as ['available', 'scheduled'], "
            "got []",
        ),
    ],
    ids=[
        "text",
        "no-period",
        "unknown-key",
        "words",
        "past-a-year",
        "empty-key",
        "unknown-state",
        "state-twice",
        "no-states",
    ],
)
def test_malformed_unique_is_KET708(value: Any, msg: str) -> None:
    job = limited(unique=value)
    assert run_checks(shop(job)) == [error("KET708", msg, obj="job sales.sync", source=job.source)]


# KET709: debounce is malformed


@pytest.mark.parametrize(
    ("value", "msg"),
    [
        (
            30,
            "debounce must be a dict such as {'period': '30s', 'key': ['customer_id']}, got 30",
        ),
        ({"max_wait": "5m"}, "debounce: 'period' is required, got {'max_wait': '5m'}"),
        (
            {"period": "30s", "states": ["available"]},
            "debounce: unknown key 'states'; its keys are 'period', 'key' and 'max_wait'",
        ),
        (
            {"period": "0s"},
            "debounce: period must be a duration '<count><s|m|h|d>' such as '30s' or '1h', "
            "got '0s'",
        ),
        (
            {"period": "30s", "max_wait": "2y"},
            "debounce: max_wait must be a duration "
            "'<count><s|m|h|d>' such as '30s' or '1h', got '2y'",
        ),
        (
            {"period": "5m", "max_wait": "1m"},
            "debounce: max_wait must be at least the period ('5m'), got '1m'",
        ),
        (
            {"period": "30s", "key": ["partner", "partner"]},
            "debounce: key names 'partner' twice, got ['partner', 'partner']",
        ),
    ],
    ids=["number", "no-period", "unknown-key", "zero", "bad-max-wait", "short-max-wait", "twice"],
)
def test_malformed_debounce_is_KET709(value: Any, msg: str) -> None:
    job = limited(debounce=value)
    assert run_checks(shop(job)) == [error("KET709", msg, obj="job sales.sync", source=job.source)]


def test_a_malformed_unique_or_debounce_never_hints_at_a_pause_KET708() -> None:
    job = limited(unique={"period": "1h", "limit": 0})
    [found] = run_checks(shop(job))
    assert (found.id, found.hint) == ("KET708", CODES["KET708"].hint)


# KET704 and KET705 on the key of a window or a debounce


@pytest.mark.parametrize("option", ["unique", "debounce"])
def test_a_window_or_debounce_key_field_the_input_lacks_is_KET704(option: str) -> None:
    job = limited(**{option: {"period": "1h", "key": ["partnr"]}})
    assert run_checks(shop(job)) == [
        with_hint(
            "KET704",
            f"{option} key field 'partnr' is not a field of the input "
            "(fields: customer_id, partner, lines, token)",
            "Write 'partner', the input field closest to 'partnr', or add 'partnr' to the "
            "job's input.",
            obj="job sales.sync",
            job=job,
        )
    ]


@pytest.mark.parametrize("option", ["unique", "debounce"])
def test_a_window_or_debounce_keyed_by_json_or_secret_is_KET705(option: str) -> None:
    job = limited(**{option: {"period": "1h", "key": ["customer_id", "lines", "token"]}})
    assert run_checks(shop(job)) == [
        error(
            "KET705",
            f"{option} key field 'lines' is json, not a scalar type",
            obj="job sales.sync",
            source=job.source,
        ),
        error(
            "KET705",
            f"{option} key field 'token' is secret, not a scalar type",
            obj="job sales.sync",
            source=job.source,
        ),
    ]


# KET710: unique and debounce on one job


def test_a_job_with_both_unique_and_debounce_is_KET710() -> None:
    job = limited(unique={"period": "1h"}, debounce={"period": "30s", "key": ["partner"]})
    assert run_checks(shop(job)) == [
        error(
            "KET710",
            "unique {'period': '1h'} and debounce {'period': '30s', 'key': ['partner']} are "
            "both declared: a debounced job already has at most one pending job per key",
            obj="job sales.sync",
            source=job.source,
        )
    ]


def test_both_declared_is_KET710_even_when_one_is_malformed() -> None:
    job = limited(unique={"period": "1h"}, debounce={"period": "soon"})
    assert [m.id for m in run_checks(shop(job))] == ["KET709", "KET710"]


# KET711: a window longer than the retention of a finished state it counts


def retention_msg(period: str, state: str, kept: int) -> str:
    return (
        f"unique period {period!r} is longer than the worker's retention_ms for {state} jobs "
        f"({kept} ms): the pruner deletes them before the window ends, and a pruned job no "
        "longer holds its key"
    )


def test_a_window_past_the_default_retention_of_completed_jobs_is_the_warning_KET711() -> None:
    job = limited(unique={"period": "30d", "key": ["customer_id"]})
    assert run_checks(shop(job)) == [
        warning(
            "KET711",
            retention_msg("30d", "completed", 604_800_000),
            obj="job sales.sync",
            source=job.source,
        )
    ]


def test_each_finished_state_kept_shorter_than_the_window_is_its_own_KET711() -> None:
    job = limited(unique={"period": "2h", "states": ["cancelled", "discarded", "completed"]})
    worker = {
        "queues": {"default": 1},
        "retention_ms": {"completed": None, "discarded": 3_600_000, "cancelled": 60_000},
    }
    assert run_checks(shop(job, worker)) == [
        warning(
            "KET711",
            retention_msg("2h", "cancelled", 60_000),
            obj="job sales.sync",
            source=job.source,
        ),
        warning(
            "KET711",
            retention_msg("2h", "discarded", 3_600_000),
            obj="job sales.sync",
            source=job.source,
        ),
    ]


@pytest.mark.parametrize(
    ("unique", "retention_ms"),
    [
        ({"period": "30d"}, {"completed": None}),
        ({"period": "30d"}, {"completed": 31 * 86_400_000}),
        ({"period": "1h"}, {"completed": 3_600_000}),
        ({"period": "30d", "states": ["available", "scheduled"]}, {"completed": 1}),
        (
            {"period": "30d", "states": ["completed"]},
            {"completed": None, "discarded": 1, "cancelled": 1},
        ),
    ],
    ids=["kept-for-ever", "kept-longer", "kept-as-long", "no-finished-state", "other-states"],
)
def test_a_window_within_the_retention_of_the_states_it_counts_is_silent_KET711(
    unique: dict[str, Any], retention_ms: dict[str, Any]
) -> None:
    worker = {"queues": {"default": 1}, "retention_ms": retention_ms}
    assert run_checks(shop(limited(unique=unique), worker)) == []


def test_the_retention_is_not_checked_on_an_invalid_worker_or_window_KET711() -> None:
    job = limited(unique={"period": "30d"})
    worker = {"queues": {"default": 1}, "retention_ms": {"completed": 0}}
    assert [m.id for m in run_checks(shop(job, worker))] == ["KET402"]
    malformed = limited(unique={"period": "30d", "states": ["done"]})
    assert [m.id for m in run_checks(shop(malformed))] == ["KET708"]
