"""run_checks: every registered check, findings in file order, tags to run a subset."""

from __future__ import annotations

from modules_example.sales import sales
from modules_example.workspace import erp

from ket import define_deployment, define_job, define_module
from ket.check import run_checks, tags

from .build import WORKER, handle


def test_example_deployment_checks_clean() -> None:
    assert run_checks(erp) == []


def test_example_deployment_checks_clean_with_a_default_timezone() -> None:
    assert run_checks(erp, timezone="Europe/London") == []


def test_findings_are_sorted_by_file_then_line_not_by_check() -> None:
    # the worker check (KET401) runs after the job check (KET101), yet `a` is declared first
    a = define_job(handler=handle, idempotent=True, queue="mail")
    b = define_job(handler=handle)
    local = define_module(name="local", jobs={"b": b, "a": a})
    deployment = define_deployment(name="mix", modules=[local, sales], worker=WORKER)
    found = run_checks(deployment)
    assert [(m.id, m.obj) for m in found] == [
        ("KET401", "job sales.send_confirmation"),  # modules_example/... sorts before tests/...
        ("KET401", "job local.a"),
        ("KET101", "job local.b"),
    ]
    places = [(m.source.file, m.source.line) for m in found]
    assert places == sorted(places)
    assert places[1:] == [(__file__, a.source.line), (__file__, b.source.line)]
    assert a.source.line < b.source.line


def test_tags_name_each_topic() -> None:
    assert tags() == [
        "effects",
        "flow",
        "models",
        "names",
        "operations",
        "schedules",
        "serve",
        "worker",
    ]


def test_only_runs_the_checks_of_those_tags() -> None:
    job = define_job(handler=handle, schedule={"every": "1s"}, queue="mail")
    module = define_module(name="sales", jobs={"tick": job})
    deployment = define_deployment(name="shop", modules=[module], worker=WORKER)
    assert [m.id for m in run_checks(deployment)] == ["KET101", "KET202", "KET401"]
    assert [m.id for m in run_checks(deployment, only=["schedules"])] == ["KET202"]
    assert [m.id for m in run_checks(deployment, only=["operations", "worker"])] == [
        "KET101",
        "KET401",
    ]
    assert run_checks(deployment, only=[]) == []
