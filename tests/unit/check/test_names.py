"""Name checks: valid identifiers, no duplicate modules, no function and job sharing a name."""

from __future__ import annotations

import pytest

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.check import run_checks

from .build import WORKER, deployment_of, error, handle

# KET001: invalid name


def test_module_name_Sales_is_KET001() -> None:
    module = define_module(name="Sales")
    deployment = define_deployment(name="shop", modules=[module], worker=WORKER)
    assert run_checks(deployment) == [
        error(
            "KET001",
            "module name 'Sales' is not valid",
            obj="module Sales",
            source=module.source,
        )
    ]


def test_job_name_send_mail_with_dash_is_KET001() -> None:
    job = define_job(handler=handle, idempotent=True)
    assert run_checks(deployment_of(jobs={"send-mail": job})) == [
        error(
            "KET001",
            "job name 'send-mail' is not valid",
            obj="job sales.send-mail",
            source=job.source,
        )
    ]


def test_function_name_with_capital_is_KET001() -> None:
    fn = define_function(handler=handle)
    assert run_checks(deployment_of(functions={"Confirm": fn})) == [
        error(
            "KET001",
            "function name 'Confirm' is not valid",
            obj="function sales.Confirm",
            source=fn.source,
        )
    ]


def test_model_name_1Order_is_KET001() -> None:
    model = define_model({"number": "string"})
    assert run_checks(deployment_of(models={"1Order": model})) == [
        error(
            "KET001",
            "model name '1Order' is not valid",
            obj="model sales.1Order",
            source=model.source,
        )
    ]


@pytest.mark.parametrize("name", ["sales", "s", "sales_2", "order_lines"])
def test_valid_module_name_is_silent(name: str) -> None:
    module = define_module(name=name)
    assert run_checks(define_deployment(name="shop", modules=[module], worker=WORKER)) == []


def test_corrected_names_are_silent() -> None:
    deployment = deployment_of(
        jobs={"send_mail": define_job(handler=handle, idempotent=True)},
        functions={"confirm": define_function(handler=handle)},
        models={"Order1": define_model({"number": "string"}), "order": define_model({})},
    )
    assert run_checks(deployment) == []


# KET002: duplicate module


def test_two_modules_named_alike_is_KET002_at_the_second() -> None:
    first = define_module(name="sales")
    second = define_module(name="sales")
    deployment = define_deployment(name="shop", modules=[first, second], worker=WORKER)
    assert run_checks(deployment) == [
        error(
            "KET002",
            "module 'sales' appears 2 times in deployment 'shop'",
            obj="module sales",
            source=second.source,
        )
    ]


def test_module_listed_three_times_is_KET002_twice() -> None:
    module = define_module(name="sales")
    deployment = define_deployment(name="shop", modules=[module] * 3, worker=WORKER)
    assert [m.msg for m in run_checks(deployment)] == [
        "module 'sales' appears 2 times in deployment 'shop'",
        "module 'sales' appears 3 times in deployment 'shop'",
    ]


def test_modules_with_distinct_names_are_silent() -> None:
    modules = [define_module(name="sales"), define_module(name="hotel")]
    assert run_checks(define_deployment(name="shop", modules=modules, worker=WORKER)) == []


# KET003: function and job share a name


def test_function_and_job_sharing_a_name_is_KET003() -> None:
    job = define_job(handler=handle, idempotent=True)
    deployment = deployment_of(
        functions={"confirm": define_function(handler=handle)}, jobs={"confirm": job}
    )
    assert run_checks(deployment) == [
        error(
            "KET003",
            "sales.confirm is declared both as a function and as a job",
            obj="job sales.confirm",
            source=job.source,
        )
    ]


def test_function_and_job_with_different_names_are_silent() -> None:
    deployment = deployment_of(
        functions={"confirm": define_function(handler=handle)},
        jobs={"confirm_later": define_job(handler=handle, idempotent=True)},
    )
    assert run_checks(deployment) == []


def test_same_job_name_in_two_modules_is_silent() -> None:
    sales = define_module(name="sales", jobs={"sync": define_job(handler=handle, idempotent=True)})
    hotel = define_module(name="hotel", jobs={"sync": define_job(handler=handle, idempotent=True)})
    assert run_checks(define_deployment(name="shop", modules=[sales, hotel], worker=WORKER)) == []
