"""Worker checks: a valid configuration, valid queue names, every job's queue configured."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_job, define_module
from ket.check import run_checks
from ket.declare import JobDecl

from .build import deployment_of, error, handle


def on_queue(queue: Any) -> JobDecl:
    return define_job(handler=handle, idempotent=True, queue=queue)


# KET401: queue not configured


def test_job_on_queue_missing_from_the_worker_is_KET401() -> None:
    job = on_queue("mail")
    deployment = deployment_of(jobs={"send": job}, worker={"queues": {"default": 2, "bulk": 1}})
    assert run_checks(deployment) == [
        error(
            "KET401",
            "queue 'mail' is not configured on deployment 'shop' (configured: bulk, default)",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_job_on_configured_queue_is_silent() -> None:
    job = on_queue("mail")
    deployment = deployment_of(jobs={"send": job}, worker={"queues": {"default": 2, "mail": 4}})
    assert run_checks(deployment) == []


def test_default_worker_configures_only_the_default_queue() -> None:
    default = define_job(handler=handle, idempotent=True)
    mail = on_queue("mail")
    sales = define_module(name="sales", jobs={"default": default, "mail": mail})
    deployment = define_deployment(name="shop", modules=[sales])
    found = run_checks(deployment)
    assert [(m.id, m.obj) for m in found] == [("KET401", "job sales.mail")]
    assert "(configured: default)" in found[0].msg


# KET403: invalid queue name


@pytest.mark.parametrize("queue", ["bad queue", "", "-mail", "q" * 65, "mail/eu", 7])
def test_job_on_invalid_queue_name_is_KET403(queue: Any) -> None:
    job = on_queue(queue)
    deployment = deployment_of(jobs={"send": job})
    assert run_checks(deployment) == [
        error(
            "KET403",
            f"queue name {queue!r} is not valid",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_invalid_queue_name_in_worker_is_KET403_at_the_deployment() -> None:
    deployment = deployment_of(worker={"queues": {"default": 1, "bad queue": 1}})
    assert run_checks(deployment) == [
        error(
            "KET403",
            "queue name 'bad queue' is not valid",
            obj="deployment shop",
            source=deployment.source,
        )
    ]


@pytest.mark.parametrize("queue", ["mail", "mail.eu-1", "Q_2", "9lives", "q" * 64])
def test_valid_queue_name_is_silent(queue: str) -> None:
    job = on_queue(queue)
    deployment = deployment_of(jobs={"send": job}, worker={"queues": {queue: 1}})
    assert run_checks(deployment) == []


# KET402: invalid worker configuration


@pytest.mark.parametrize(
    ("worker", "msg"),
    [
        ({"poll_min_ms": -1}, "poll_min_ms: Input should be greater than 0, got -1"),
        (
            {"poll_min_ms": 500, "poll_max_ms": 100},
            "worker: Value error, poll_max_ms (100) must be at least poll_min_ms (500)",
        ),
        ({"colour": "red"}, "colour: Extra inputs are not permitted, got 'red'"),
        (
            {"queues": {"default": 0}},
            "queues.default: Input should be greater than 0, got 0",
        ),
        (
            {"queues": {"default": 1001}},
            "queues.default: Input should be less than or equal to 1000, got 1001",
        ),
        ({"queues": {}}, "worker: Value error, queues must name at least one queue"),
        (
            {"shutdown_grace_ms": -1},
            "shutdown_grace_ms: Input should be greater than or equal to 0, got -1",
        ),
        ({"lease_ms": True}, "lease_ms: Input should be a valid integer, got True"),
        ({"lease_ms": "30000"}, "lease_ms: Input should be a valid integer, got '30000'"),
    ],
    ids=[
        "poll-min-negative",
        "poll-max-below-min",
        "unknown-key",
        "concurrency-zero",
        "concurrency-over-1000",
        "no-queues",
        "grace-negative",
        "bool",
        "string",
    ],
)
def test_invalid_worker_config_is_KET402_naming_the_value(
    worker: dict[str, object], msg: str
) -> None:
    deployment = deployment_of(worker=worker)
    assert run_checks(deployment) == [
        error("KET402", msg, obj="deployment shop", source=deployment.source)
    ]


def test_every_worker_problem_is_in_one_KET402() -> None:
    deployment = deployment_of(worker={"poll_min_ms": -1, "queues": {"default": 0}, "x": 1})
    (finding,) = run_checks(deployment)
    assert finding.id == "KET402"
    assert finding.msg.split("; ") == [
        "queues.default: Input should be greater than 0, got 0",
        "poll_min_ms: Input should be greater than 0, got -1",
        "x: Extra inputs are not permitted, got 1",
    ]


@pytest.mark.parametrize(
    "worker",
    [
        {},
        {"queues": {"default": 1}, "shutdown_grace_ms": 0},
        {"poll_min_ms": 100, "poll_max_ms": 100},
        {
            "queues": {"default": 2, "mail": 4},
            "poll_min_ms": 50,
            "poll_max_ms": 2_000,
            "tenant_refresh_ms": 30_000,
            "lease_ms": 30_000,
            "shutdown_grace_ms": 15_000,
            "schedule_sweep_ms": 30_000,
        },
    ],
    ids=["empty", "zero-grace", "equal-poll", "full"],
)
def test_valid_worker_config_is_silent(worker: dict[str, object]) -> None:
    assert run_checks(deployment_of(worker=worker)) == []


def test_a_worker_whose_queue_limits_alone_are_wrong_has_no_KET402() -> None:
    deployment = deployment_of(
        jobs={"send": on_queue("mail")},
        worker={"queues": {"default": {"concurrency": 1, "concurrency_limit": -1}}},
    )
    assert [m.id for m in run_checks(deployment)] == ["KET706"]  # and queues go unchecked


def test_a_queue_dict_without_its_concurrency_is_KET402() -> None:
    deployment = deployment_of(worker={"queues": {"default": {"concurrency_limit": 3}}})
    assert run_checks(deployment) == [
        error(
            "KET402",
            "queues.default: a queue given as a dict needs its 'concurrency' (jobs at once per "
            "worker process), got {'concurrency_limit': 3}",
            obj="deployment shop",
            source=deployment.source,
        )
    ]


def test_a_job_on_a_queue_given_as_a_dict_is_configured() -> None:
    deployment = deployment_of(
        jobs={"send": on_queue("mail")},
        worker={"queues": {"default": 1, "mail": {"concurrency": 2, "concurrency_limit": 5}}},
    )
    assert run_checks(deployment) == []
