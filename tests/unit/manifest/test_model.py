"""Manifest model: members by qualified name; entries strict about keys; schedules terse."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from ket.manifest import (
    FunctionEntry,
    JobEntry,
    Manifest,
    ModelEntry,
    ModuleEntry,
    ScheduleEntry,
    WorkerEntry,
)

WORKER = WorkerEntry(
    queues={"default": 1},
    poll_min_ms=50,
    poll_max_ms=2_000,
    tenant_refresh_ms=30_000,
    lease_ms=30_000,
    shutdown_grace_ms=15_000,
    schedule_sweep_ms=30_000,
)
FUNCTION = FunctionEntry(handler="m:f", input={}, effects=[], cross_company=False)
JOB = JobEntry(
    handler="m:j",
    input={},
    effects=[],
    cross_company=False,
    queue="default",
    idempotent=True,
    max_attempts=20,
    timeout_ms=300_000,
    priority=0,
    backoff="default",
    schedule=None,
)


def manifest() -> Manifest:
    return Manifest(
        format=1,
        deployment="erp",
        modules={
            "sales": ModuleEntry(
                models={"Order": ModelEntry(fields={"n": "int"})},
                functions={"confirm": FUNCTION},
                jobs={"send": JOB},
            ),
            "hotel": ModuleEntry(models={}, functions={}, jobs={"audit": JOB}),
        },
        worker=WORKER,
    )


def test_members_are_listed_by_qualified_name() -> None:
    m = manifest()
    assert m.jobs() == {"sales.send": JOB, "hotel.audit": JOB}
    assert m.functions() == {"sales.confirm": FUNCTION}
    assert m.models() == {"sales.Order": ModelEntry(fields={"n": "int"})}


def test_schedule_entry_dumps_only_the_kind_it_has() -> None:
    every = ScheduleEntry(every="15m", fingerprint="ab")
    daily = ScheduleEntry(daily_at="03:00", timezone="UTC", fingerprint="cd")
    assert every.model_dump() == {"every": "15m", "fingerprint": "ab"}
    assert daily.model_dump() == {"daily_at": "03:00", "timezone": "UTC", "fingerprint": "cd"}


def test_entries_refuse_unknown_keys() -> None:
    with pytest.raises(ValidationError):
        ModelEntry.model_validate({"fields": {}, "colour": "red"})


def test_job_backoff_is_default_or_custom() -> None:
    with pytest.raises(ValidationError):
        JobEntry.model_validate({**JOB.model_dump(), "backoff": "linear"})


def test_manifest_format_is_1() -> None:
    with pytest.raises(ValidationError):
        Manifest.model_validate({**manifest().model_dump(), "format": 2})


def test_a_job_entry_without_flow_options_dumps_as_an_older_manifest_has_it() -> None:
    dumped = JOB.model_dump()
    assert not {"expires_in", "concurrency_limit", "rate_limit", "unique", "debounce"} & set(dumped)
    assert JobEntry.model_validate(dumped) == JOB
    assert (
        WORKER.model_dump().keys()
        == WorkerEntry.model_validate(WORKER.model_dump()).model_dump().keys()
    )
    assert "limits" not in WORKER.model_dump()


def test_flow_entries_round_trip_leaving_out_an_empty_key() -> None:
    job = JobEntry.model_validate(
        {
            **JOB.model_dump(),
            "expires_in": "90s",
            "concurrency_limit": {"limit": 1, "key": ["b", "a"]},
            "rate_limit": {"limit": 5, "period": "1m"},
        }
    )
    assert job.model_dump()["concurrency_limit"] == {"limit": 1, "key": ["b", "a"]}
    assert job.model_dump()["rate_limit"] == {"limit": 5, "period": "1m"}
    assert (job.expires_in_seconds, job.rate_limit and job.rate_limit.seconds) == (90, 60)
    assert JobEntry.model_validate(job.model_dump()) == job


@pytest.mark.parametrize(
    "flow",
    [
        {"expires_in": "soon"},
        {"expires_in": "0s"},
        {"concurrency_limit": {"limit": 0}},
        {"rate_limit": {"limit": 5, "period": "2d"}},
        {"rate_limit": {"limit": 5}},
        {"rate_limit": {"limit": 5, "period": "1s", "burst": 2}},
        {"unique": {"period": "1h"}},
        {"unique": {"period": "400d", "states": ["completed"]}},
        {"unique": {"period": "1h", "states": ["done"]}},
        {"unique": {"period": "1h", "states": []}},
        {"unique": {"period": "1h", "states": ["completed", "completed"]}},
        {"debounce": {"period": "0s"}},
        {"debounce": {"period": "5m", "max_wait": "1m"}},
        {"debounce": {"period": "5m", "max_wait": "soon"}},
        {"debounce": {"period": "5m", "states": ["available"]}},
        {"unique": {"period": "1h", "states": ["available"]}, "debounce": {"period": "30s"}},
    ],
)
def test_a_manifest_flow_value_no_declaration_could_give_is_refused(
    flow: dict[str, object],
) -> None:
    with pytest.raises(ValidationError):
        JobEntry.model_validate({**JOB.model_dump(), **flow})


def test_window_and_debounce_entries_round_trip_leaving_out_what_is_unset() -> None:
    unique = {"period": "1h", "key": ["b", "a"], "states": ["available", "completed"]}
    job = JobEntry.model_validate({**JOB.model_dump(), "unique": unique})
    assert job.model_dump()["unique"] == unique
    assert job.unique is not None
    assert (job.unique.seconds, job.unique.default_states) == (3600, False)
    assert JobEntry.model_validate(job.model_dump()) == job
    whole = JobEntry.model_validate(
        {**JOB.model_dump(), "unique": {"period": "1d", "key": [], "states": ["completed"]}}
    )
    assert whole.model_dump()["unique"] == {"period": "1d", "states": ["completed"]}
    debounced = JobEntry.model_validate(
        {**JOB.model_dump(), "debounce": {"period": "30s", "key": [], "max_wait": None}}
    )
    assert debounced.model_dump()["debounce"] == {"period": "30s"}
    assert debounced.debounce is not None
    assert (debounced.debounce.seconds, debounced.debounce.max_wait_seconds) == (30, None)
    waited = {"period": "30s", "key": ["a"], "max_wait": "5m"}
    job = JobEntry.model_validate({**JOB.model_dump(), "debounce": waited})
    assert job.model_dump()["debounce"] == waited
    assert job.debounce is not None and job.debounce.max_wait_seconds == 300
    assert JobEntry.model_validate(job.model_dump()) == job


def test_a_window_takes_its_states_in_the_order_of_the_job_states() -> None:
    states = ["completed", "available", "retryable", "executing", "scheduled"]
    job = JobEntry.model_validate(
        {**JOB.model_dump(), "unique": {"period": "1h", "states": states}}
    )
    assert job.unique is not None
    assert job.unique.states == ["available", "scheduled", "executing", "retryable", "completed"]
    assert job.unique.default_states


def test_queue_limits_take_no_key_and_name_only_queues_of_the_worker() -> None:
    limits = {
        "default": {"concurrency_limit": {"limit": 2}, "rate_limit": {"limit": 1, "period": "1s"}}
    }
    worker = WorkerEntry.model_validate({**WORKER.model_dump(), "limits": limits})
    assert worker.model_dump()["limits"] == limits
    keyed = {"default": {"concurrency_limit": {"limit": 2, "key": ["a"]}}}
    with pytest.raises(ValidationError, match="a queue's limit takes no key"):
        WorkerEntry.model_validate({**WORKER.model_dump(), "limits": keyed})
    with pytest.raises(ValidationError, match="limits name queues that queues lacks: mail"):
        WorkerEntry.model_validate(
            {**WORKER.model_dump(), "limits": {"mail": {"concurrency_limit": {"limit": 2}}}}
        )
