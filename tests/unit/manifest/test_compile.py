"""compile_manifest: declarations that pass `ket check` become a deterministic manifest."""

from __future__ import annotations

import pytest
from modules_example.workspace import erp
from pydantic import BaseModel

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.check import error_messages, run_checks
from ket.declare import DeploymentDecl, JobDecl
from ket.errors import CheckFailed
from ket.manifest import (
    ConcurrencyLimitEntry,
    JobEntry,
    QueueLimitsEntry,
    RateLimitEntry,
    ScheduleEntry,
    WorkerEntry,
    compile_manifest,
    dump_manifest,
)
from ket.manifest.model import DebounceEntry, UniqueEntry

WORKER = {"queues": {"default": 1}}


def handle(ctx: object, input: object) -> None:
    """A handler."""


def backoff(attempt: int) -> float:
    return 1.0


class NoteInput(BaseModel):
    note: str = ""


def one_job(job: JobDecl) -> DeploymentDecl:
    return define_deployment(
        name="shop", modules=[define_module(name="sales", jobs={"send": job})], worker=WORKER
    )


def test_two_compiles_of_the_example_dump_to_identical_bytes() -> None:
    first = dump_manifest(compile_manifest(erp))
    second = dump_manifest(compile_manifest(erp))
    assert first.encode() == second.encode()


def test_example_manifest_lists_every_module_and_job() -> None:
    manifest = compile_manifest(erp)
    assert (manifest.format, manifest.deployment) == (1, "erp")
    assert sorted(manifest.modules) == ["company", "hotel", "sales"]
    assert sorted(manifest.jobs()) == [
        "hotel.catch_up",
        "hotel.close_day",
        "hotel.night_audit",
        "sales.issue_invoice",
        "sales.send_confirmation",
    ]
    assert sorted(manifest.functions()) == ["sales.confirm_order", "sales.place_order"]
    assert manifest.models()["sales.Order"].fields == {
        "number": "string",
        "email": "string",
        "status": "string",
    }
    assert manifest.worker.queues == {"default": 2, "mail": 4, "maintenance": 1}


def test_example_night_audit_records_its_wall_clock_schedule() -> None:
    audit = compile_manifest(erp).jobs()["hotel.night_audit"]
    assert audit.schedule is not None
    assert (audit.schedule.daily_at, audit.schedule.timezone) == ("03:00", "Asia/Ho_Chi_Minh")
    assert (audit.queue, audit.cross_company, audit.timeout_ms) == ("maintenance", True, 120_000)
    assert audit.effects == ["enqueue:hotel.close_day", "read:company.Company"]


def test_compile_refuses_a_deployment_with_check_errors_carrying_the_findings() -> None:
    job = define_job(handler=handle, queue="mail", effects=["read:sales.Nope", "storage:read"])
    deployment = one_job(job)
    with pytest.raises(CheckFailed) as raised:
        compile_manifest(deployment)
    assert [m.id for m in raised.value.messages] == ["KET101", "KET302", "KET401"]
    assert raised.value.messages == tuple(error_messages(run_checks(deployment)))
    assert "read:sales.Nope" in raised.value.message


def test_warnings_do_not_stop_compile_and_duplicate_effects_appear_once() -> None:
    job = define_job(handler=handle, idempotent=True, effects=["storage:read", "storage:read"])
    manifest = compile_manifest(one_job(job))
    assert manifest.jobs()["sales.send"].effects == ["storage:read"]


def test_default_timezone_is_recorded_as_the_schedule_timezone() -> None:
    job = define_job(handler=handle, idempotent=True, schedule={"daily_at": "03:00"})
    manifest = compile_manifest(one_job(job), timezone="Europe/Oslo")
    schedule = manifest.jobs()["sales.send"].schedule
    assert schedule is not None
    assert (schedule.daily_at, schedule.timezone) == ("03:00", "Europe/Oslo")
    assert "timezone: Europe/Oslo" in dump_manifest(manifest)


def test_KET_TIMEZONE_is_the_default_when_no_timezone_is_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KET_TIMEZONE", "America/Sao_Paulo")
    job = define_job(handler=handle, idempotent=True, schedule={"cron": "0 3 * * *"})
    schedule = compile_manifest(one_job(job)).jobs()["sales.send"].schedule
    assert schedule is not None
    assert (schedule.cron, schedule.timezone) == ("0 3 * * *", "America/Sao_Paulo")


def test_schedule_timezone_wins_over_the_default() -> None:
    job = define_job(
        handler=handle, idempotent=True, schedule={"daily_at": "03:00", "timezone": "Asia/Tokyo"}
    )
    schedule = compile_manifest(one_job(job), timezone="Europe/Oslo").jobs()["sales.send"].schedule
    assert schedule is not None and schedule.timezone == "Asia/Tokyo"


def test_wall_clock_schedule_without_any_zone_does_not_compile() -> None:
    job = define_job(handler=handle, idempotent=True, schedule={"daily_at": "03:00"})
    with pytest.raises(CheckFailed) as raised:
        compile_manifest(one_job(job))
    assert [m.id for m in raised.value.messages] == ["KET205"]


def test_changing_the_default_zone_changes_the_fingerprint() -> None:
    job = define_job(handler=handle, idempotent=True, schedule={"daily_at": "03:00"})
    oslo = compile_manifest(one_job(job), timezone="Europe/Oslo").jobs()["sales.send"].schedule
    tokyo = compile_manifest(one_job(job), timezone="Asia/Tokyo").jobs()["sales.send"].schedule
    assert oslo is not None and tokyo is not None
    assert oslo.fingerprint != tokyo.fingerprint


def test_input_schema_of_a_shorthand_job_lists_required_fields() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input={"order_id": "id", "email": "string", "note": "string?"},
    )
    schema = compile_manifest(one_job(job)).jobs()["sales.send"].input
    assert schema["required"] == ["order_id", "email"]
    assert sorted(schema["properties"]) == ["email", "note", "order_id"]
    assert schema["additionalProperties"] is False
    assert schema["title"] == "sales.send"


def test_input_schema_of_a_pydantic_job_is_its_model_schema() -> None:
    job = define_job(handler=handle, idempotent=True, input=NoteInput)
    schema = compile_manifest(one_job(job)).jobs()["sales.send"].input
    assert schema == NoteInput.model_json_schema()
    assert "required" not in schema


def test_job_entry_resolves_every_option() -> None:
    job = define_job(handler=handle, idempotent=True)
    custom = define_job(
        handler=handle,
        idempotent=True,
        queue="mail",
        max_attempts=3,
        timeout_ms=1_000,
        priority=-2,
        backoff=backoff,
        cross_company=True,
        schedule={"every": "15m"},
        effects=["transport:send", "read:sales.Order"],
    )
    sales = define_module(
        name="sales",
        models={"Order": define_model({"number": "string"})},
        functions={"confirm": define_function(handler=handle)},
        jobs={"plain": job, "custom": custom},
    )
    deployment = define_deployment(
        name="shop", modules=[sales], worker={"queues": {"default": 1, "mail": 2}}
    )
    manifest = compile_manifest(deployment)
    empty_input = {
        "additionalProperties": False,
        "properties": {},
        "title": "sales.plain",
        "type": "object",
    }
    assert manifest.jobs()["sales.plain"] == JobEntry(
        handler=f"{__name__}:handle",
        input=empty_input,
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
    entry = manifest.jobs()["sales.custom"]
    assert (entry.queue, entry.max_attempts, entry.timeout_ms, entry.priority) == (
        "mail",
        3,
        1_000,
        -2,
    )
    assert (entry.backoff, entry.cross_company) == ("custom", True)
    assert entry.effects == ["read:sales.Order", "transport:send"]
    assert entry.schedule == ScheduleEntry(every="15m", fingerprint=entry.schedule.fingerprint)  # type: ignore[union-attr]
    assert manifest.functions()["sales.confirm"].handler == f"{__name__}:handle"


def test_worker_entry_fills_in_defaults() -> None:
    manifest = compile_manifest(one_job(define_job(handler=handle, idempotent=True)))
    assert manifest.worker == WorkerEntry(
        queues={"default": 1},
        poll_min_ms=50,
        poll_max_ms=2_000,
        tenant_refresh_ms=30_000,
        lease_ms=30_000,
        shutdown_grace_ms=15_000,
        schedule_sweep_ms=30_000,
    )


def test_declared_tags_are_recorded_cleaned_and_none_are_left_out() -> None:
    def send(ctx: object, input: object) -> None: ...

    module = define_module(
        name="shop",
        jobs={
            "tagged": define_job(idempotent=True, tags=[" billing", "eu", "billing"], handler=send),
            "plain": define_job(idempotent=True, handler=send),
        },
    )
    text = dump_manifest(compile_manifest(define_deployment(name="main", modules=[module])))
    jobs = compile_manifest(define_deployment(name="main", modules=[module])).modules["shop"].jobs
    assert jobs["tagged"].tags == ["billing", "eu"]
    assert jobs["plain"].tags == []
    assert text.count("tags:") == 1  # a job without tags writes none: older manifests stay equal


def test_serve_is_recorded_only_when_declared_with_the_authenticator_by_name() -> None:
    module = define_module(name="sales")
    plain = compile_manifest(define_deployment(name="shop", modules=[module]))
    assert plain.serve is None
    assert "serve" not in dump_manifest(plain)
    served = compile_manifest(
        define_deployment(name="shop", modules=[module], serve={"authenticate": backoff})
    )
    assert served.serve is not None
    assert served.serve.authenticate == "tests.unit.manifest.test_compile:backoff"
    assert served.serve.max_body_bytes == 1_048_576


def test_flow_options_are_recorded_with_keys_in_their_declared_order() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input={"customer_id": "id", "partner": "string"},
        expires_in="10m",
        concurrency_limit={"limit": 1, "key": ["partner", "customer_id"]},
        rate_limit={"limit": 20, "period": "1s"},
    )
    entry = compile_manifest(one_job(job)).jobs()["sales.send"]
    assert (entry.expires_in, entry.expires_in_seconds) == ("10m", 600)
    assert entry.concurrency_limit == ConcurrencyLimitEntry(limit=1, key=["partner", "customer_id"])
    assert entry.rate_limit == RateLimitEntry(limit=20, period="1s")
    text = dump_manifest(compile_manifest(one_job(job)))
    assert "        expires_in: 10m\n" in text
    assert (
        "        concurrency_limit:\n          key:\n          - partner\n"
        "          - customer_id\n          limit: 1\n"
    ) in text
    assert "        rate_limit:\n          limit: 20\n          period: 1s\n" in text  # no key


def test_a_concurrency_limit_given_as_a_number_is_recorded_as_its_limit() -> None:
    job = define_job(handler=handle, idempotent=True, concurrency_limit=3)
    entry = compile_manifest(one_job(job)).jobs()["sales.send"]
    assert entry.concurrency_limit == ConcurrencyLimitEntry(limit=3)


def test_a_job_without_flow_options_writes_none_of_them() -> None:
    text = dump_manifest(compile_manifest(one_job(define_job(handler=handle, idempotent=True))))
    for name in ("expires_in", "concurrency_limit", "rate_limit", "limits", "unique", "debounce"):
        assert name not in text


def test_a_unique_window_is_recorded_with_its_effective_states_always() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input={"customer_id": "id", "partner": "string"},
        unique={"period": "1h", "key": ["partner", "customer_id"]},
    )
    entry = compile_manifest(one_job(job)).jobs()["sales.send"]
    assert entry.unique == UniqueEntry(
        period="1h",
        key=["partner", "customer_id"],
        states=["available", "scheduled", "executing", "retryable", "completed"],
    )
    assert entry.debounce is None
    text = dump_manifest(compile_manifest(one_job(job)))
    assert (
        "        unique:\n          key:\n          - partner\n          - customer_id\n"
        "          period: 1h\n          states:\n          - available\n"
    ) in text
    chosen = define_job(
        handler=handle,
        idempotent=True,
        unique={"period": "1d", "states": ["cancelled", "available"]},
    )
    entry = compile_manifest(one_job(chosen)).jobs()["sales.send"]
    assert entry.unique == UniqueEntry(period="1d", states=["available", "cancelled"])
    assert "        unique:\n          period: 1d\n          states:\n" in dump_manifest(
        compile_manifest(one_job(chosen))
    )  # no key


def test_a_debounce_is_recorded_leaving_out_what_it_does_not_declare() -> None:
    job = define_job(
        handler=handle,
        idempotent=True,
        input={"customer_id": "id"},
        debounce={"period": "30s", "key": ["customer_id"], "max_wait": "5m"},
    )
    entry = compile_manifest(one_job(job)).jobs()["sales.send"]
    assert entry.debounce == DebounceEntry(period="30s", key=["customer_id"], max_wait="5m")
    assert entry.unique is None
    assert (
        "        debounce:\n          key:\n          - customer_id\n"
        "          max_wait: 5m\n          period: 30s\n"
    ) in dump_manifest(compile_manifest(one_job(job)))
    bare = define_job(handler=handle, idempotent=True, debounce={"period": "30s"})
    entry = compile_manifest(one_job(bare)).jobs()["sales.send"]
    assert entry.debounce == DebounceEntry(period="30s")
    assert "        debounce:\n          period: 30s\n        effects:" in dump_manifest(
        compile_manifest(one_job(bare))
    )


def test_queue_limits_are_recorded_on_the_worker_and_none_are_left_out() -> None:
    worker = {
        "queues": {
            "default": 1,
            "mail": {"concurrency": 2},
            "partners": {
                "concurrency": 4,
                "concurrency_limit": 10,
                "rate_limit": {"limit": 100, "period": "1m"},
            },
        }
    }
    deployment = define_deployment(
        name="shop", modules=[define_module(name="sales")], worker=worker
    )
    manifest = compile_manifest(deployment)
    assert manifest.worker.queues == {"default": 1, "mail": 2, "partners": 4}
    assert manifest.worker.limits == {
        "partners": QueueLimitsEntry(
            concurrency_limit=ConcurrencyLimitEntry(limit=10),
            rate_limit=RateLimitEntry(limit=100, period="1m"),
        )
    }
    assert (
        "  limits:\n    partners:\n      concurrency_limit:\n        limit: 10\n"
        "      rate_limit:\n        limit: 100\n        period: 1m\n"
    ) in dump_manifest(manifest)
