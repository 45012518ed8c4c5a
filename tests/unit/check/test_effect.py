"""Effect checks: the grammar, a target the deployment ships, and each effect declared once."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.check import run_checks
from ket.declare import DeploymentDecl, JobDecl

from .build import WORKER, error, handle, warning

GRAMMAR = (
    "read:<module>.<Model>, write:<module>.<Model>, enqueue:<module>.<job>, "
    "storage:read, storage:write or transport:send"
)


def shop(job: JobDecl) -> DeploymentDecl:
    """Deployment 'shop': module sales (model Order, job send = `job`), module company."""
    sales = define_module(
        name="sales", models={"Order": define_model({"number": "string"})}, jobs={"send": job}
    )
    company = define_module(name="company", models={"Company": define_model({"name": "string"})})
    return define_deployment(name="shop", modules=[sales, company], worker=WORKER)


def with_effects(*effects: Any) -> JobDecl:
    return define_job(handler=handle, idempotent=True, effects=list(effects))


# KET301: malformed effect


@pytest.mark.parametrize(
    ("effect", "msg"),
    [
        ("read:sales", "effect 'read:sales' must name its target as read:<module>.<Model>"),
        (
            "delete:sales.Order",
            f"effect 'delete:sales.Order' has unknown kind 'delete'; expected one of {GRAMMAR}",
        ),
        (
            "storage:delete",
            "effect 'storage:delete' is not valid; expected storage:read or storage:write",
        ),
        (42, "effect must be a string such as 'read:sales.Order', got 42"),
        ("transport", f"effect 'transport' has no ':'; expected one of {GRAMMAR}"),
        ("transport:receive", "effect 'transport:receive' is not valid; expected transport:send"),
        (
            "enqueue:sales.Send",
            "effect 'enqueue:sales.Send' must name its target as enqueue:<module>.<job>",
        ),
        (
            "write:Sales.Order",
            "effect 'write:Sales.Order' must name its target as write:<module>.<Model>",
        ),
        (
            "read:sales.Order.id",
            "effect 'read:sales.Order.id' must name its target as read:<module>.<Model>",
        ),
    ],
)
def test_malformed_effect_is_KET301(effect: Any, msg: str) -> None:
    job = with_effects(effect)
    assert run_checks(shop(job)) == [error("KET301", msg, obj="job sales.send", source=job.source)]


def test_malformed_effect_of_a_function_is_KET301() -> None:
    fn = define_function(handler=handle, effects=["read:sales"])
    sales = define_module(name="sales", functions={"confirm": fn})
    found = run_checks(define_deployment(name="shop", modules=[sales], worker=WORKER))
    assert [(m.id, m.obj, m.source) for m in found] == [
        ("KET301", "function sales.confirm", fn.source)
    ]


@pytest.mark.parametrize(
    "effect",
    [
        "read:sales.Order",
        "write:sales.Order",
        "enqueue:sales.send",
        "storage:read",
        "storage:write",
        "transport:send",
        "read:company.Company",
    ],
)
def test_well_formed_effect_that_resolves_is_silent(effect: str) -> None:
    assert run_checks(shop(with_effects(effect))) == []


# KET302: effect names nothing in the deployment


def test_effect_on_unknown_module_is_KET302() -> None:
    job = with_effects("read:billing.Invoice")
    assert run_checks(shop(job)) == [
        error(
            "KET302",
            "effect 'read:billing.Invoice' names module 'billing', which deployment 'shop' "
            "does not ship (modules: company, sales)",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_effect_on_unknown_model_is_KET302() -> None:
    job = with_effects("write:sales.Invoice")
    assert run_checks(shop(job)) == [
        error(
            "KET302",
            "effect 'write:sales.Invoice' names model 'Invoice', which module 'sales' "
            "does not declare (models: Order)",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_effect_enqueueing_unknown_job_is_KET302() -> None:
    job = with_effects("enqueue:company.send")
    assert run_checks(shop(job)) == [
        error(
            "KET302",
            "effect 'enqueue:company.send' names job 'send', which module 'company' "
            "does not declare (jobs: none)",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_reading_a_job_as_a_model_is_KET302() -> None:
    job = with_effects("read:sales.send")
    (finding,) = run_checks(shop(job))
    assert finding.id == "KET302"
    assert "model 'send'" in finding.msg


def test_enqueueing_a_function_is_KET302() -> None:
    fn = define_function(handler=handle, effects=["enqueue:sales.confirm"])
    sales = define_module(name="sales", functions={"confirm": fn})
    found = run_checks(define_deployment(name="shop", modules=[sales], worker=WORKER))
    assert [(m.id, m.obj) for m in found] == [("KET302", "function sales.confirm")]
    assert "job 'confirm'" in found[0].msg


def test_effect_on_a_module_missing_from_the_deployment_is_silent_once_it_ships() -> None:
    job = with_effects("read:billing.Invoice")
    billing = define_module(name="billing", models={"Invoice": define_model({"n": "int"})})
    sales = define_module(name="sales", jobs={"send": job})
    without = define_deployment(name="shop", modules=[sales], worker=WORKER)
    with_billing = define_deployment(name="shop", modules=[sales, billing], worker=WORKER)
    assert [m.id for m in run_checks(without)] == ["KET302"]
    assert run_checks(with_billing) == []


# KET303: effect declared twice


def test_duplicate_effect_is_KET303_warning() -> None:
    job = with_effects("read:sales.Order", "transport:send", "read:sales.Order")
    assert run_checks(shop(job)) == [
        warning(
            "KET303",
            "effect 'read:sales.Order' is declared twice",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_effects_declared_once_each_are_silent() -> None:
    assert run_checks(shop(with_effects("read:sales.Order", "transport:send"))) == []


def test_effects_findings_of_one_job_are_listed_together() -> None:
    job = with_effects("read:sales", "read:nope.X", "storage:read", "storage:read")
    assert [(m.id, m.level.label) for m in run_checks(shop(job))] == [
        ("KET301", "error"),
        ("KET302", "error"),
        ("KET303", "warning"),
    ]
