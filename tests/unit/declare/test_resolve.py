"""resolve: declarations as written turned into the typed values checks and the manifest use."""

from __future__ import annotations

import pytest

from ket import define_deployment, define_job, define_module
from ket.declare import resolve
from ket.declare.effect import Effect
from ket.declare.flow import ConcurrencyLimit, RateLimit
from ket.errors import DeclarationError, ScheduleError


def handle(ctx: object, input: object) -> None:
    """A handler."""


@pytest.mark.parametrize(
    ("environ", "zone"),
    [
        ({}, None),
        ({"KET_TIMEZONE": ""}, None),
        ({"KET_TIMEZONE": "   "}, None),
        ({"KET_TIMEZONE": " Europe/Oslo\n"}, "Europe/Oslo"),
        ({"TZ": "Europe/Oslo"}, None),
    ],
)
def test_default_timezone_is_KET_TIMEZONE_never_the_server_zone(
    environ: dict[str, str], zone: str | None
) -> None:
    assert resolve.default_timezone(environ) == zone


def test_default_timezone_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KET_TIMEZONE", "Asia/Tokyo")
    assert resolve.default_timezone() == "Asia/Tokyo"
    monkeypatch.delenv("KET_TIMEZONE")
    assert resolve.default_timezone() is None


def test_effects_are_parsed_in_declaration_order() -> None:
    job = define_job(handler=handle, effects=["transport:send", "read:a.B"])
    assert resolve.effects(job) == (
        Effect(verb="transport", target="send"),
        Effect(verb="read", target="a.B"),
    )


def test_input_model_is_titled_with_the_qualified_name() -> None:
    module = define_module(
        name="sales", jobs={"send": define_job(handler=handle, input={"a": "id"})}
    )
    schema = resolve.input_model(module.jobs["send"]).model_json_schema()
    assert schema["title"] == "sales.send"


def test_schedule_uses_the_default_zone_and_is_none_when_absent() -> None:
    wall = define_job(handler=handle, schedule={"daily_at": "03:00"})
    assert resolve.schedule(define_job(handler=handle), "UTC") is None
    parsed = resolve.schedule(wall, "Europe/Oslo")
    assert parsed is not None
    assert parsed.to_manifest()["timezone"] == "Europe/Oslo"
    with pytest.raises(ScheduleError):
        resolve.schedule(wall, None)


def test_worker_config_error_names_key_and_value() -> None:
    deployment = define_deployment(name="erp", modules=[], worker={"lease_ms": -7})
    with pytest.raises(DeclarationError) as raised:
        resolve.worker_config(deployment)
    assert raised.value.message == "lease_ms: Input should be greater than 0, got -7"


def test_handler_name_is_module_and_qualname_not_a_path() -> None:
    job = define_job(handler=handle)
    assert resolve.handler_name(job) == f"{__name__}:handle"
    assert "/" not in resolve.handler_name(job)


def test_flow_options_resolve_to_seconds_and_limits_and_are_none_when_absent() -> None:
    plain = define_job(handler=handle)
    assert (resolve.expires_in(plain), resolve.concurrency_limit(plain)) == (None, None)
    assert resolve.rate_limit(plain) is None
    job = define_job(
        handler=handle,
        input={"customer_id": "id", "partner": "string"},
        expires_in="10m",
        concurrency_limit={"limit": 1, "key": ["customer_id"]},
        rate_limit={"limit": 10, "period": "1m", "key": ["partner", "customer_id"]},
    )
    assert resolve.expires_in(job) == 600.0
    assert resolve.concurrency_limit(job) == ConcurrencyLimit(limit=1, key=("customer_id",))
    assert resolve.rate_limit(job) == RateLimit(
        limit=10, period="1m", seconds=60.0, key=("partner", "customer_id")
    )


def test_a_limit_keyed_by_a_field_the_input_lacks_does_not_resolve() -> None:
    job = define_job(
        handler=handle,
        input={"partner": "string"},
        rate_limit={"limit": 1, "period": "1s", "key": ["customer"]},
    )
    with pytest.raises(DeclarationError) as raised:
        resolve.rate_limit(job)
    assert raised.value.message == (
        "rate_limit key field 'customer' is not a field of the input (fields: partner)"
    )


def test_worker_problems_keep_the_queues_limits_apart() -> None:
    partners = {"concurrency": 4, "concurrency_limit": 0}
    worker = {"queues": {"default": 1, "partners": partners}, "lease_ms": -7}
    deployment = define_deployment(name="erp", modules=[], worker=worker)
    assert resolve.worker_problems(deployment) == resolve.WorkerProblems(
        general=("lease_ms: Input should be greater than 0, got -7",),
        queue_limits=(
            resolve.QueueLimitProblem(
                queue="partners",
                message="concurrency_limit: limit must be a whole number from 1 to 2147483647, "
                "got 0",
                entry=partners,
            ),
        ),
    )
    with pytest.raises(DeclarationError) as raised:
        resolve.worker_config(deployment)
    assert raised.value.message == (
        "lease_ms: Input should be greater than 0, got -7; queues.partners: concurrency_limit: "
        "limit must be a whole number from 1 to 2147483647, got 0"
    )
    valid = define_deployment(name="erp", modules=[], worker={"queues": {"default": 1}})
    assert resolve.worker_problems(valid) == resolve.WorkerProblems()
