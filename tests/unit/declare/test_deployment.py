"""define_deployment: the modules it ships and its worker, kept as written; lookups by name."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_function, define_job, define_model, define_module
from ket.errors import DeclarationError

from .location import marked


def handle(ctx: object, input: object) -> None:
    """A handler."""


SALES = define_module(
    name="sales",
    models={"Order": define_model({"number": "string"})},
    functions={"confirm": define_function(handler=handle)},
    jobs={"send": define_job(handler=handle, idempotent=True)},
)
HOTEL = define_module(name="hotel", jobs={"audit": define_job(handler=handle, idempotent=True)})


def test_deployment_keeps_its_modules_in_order_and_its_source() -> None:
    deployment = define_deployment(name="erp", modules=[SALES, HOTEL])  # deployment-call
    assert deployment.modules == (SALES, HOTEL)
    assert deployment.source == marked("deployment-call", __file__)


def test_worker_is_kept_as_written_as_a_copy() -> None:
    worker: dict[str, object] = {"queues": {"default": 0}, "colour": "red"}
    deployment = define_deployment(name="erp", modules=[SALES], worker=worker)
    worker["lease_ms"] = 1
    assert deployment.worker == {"queues": {"default": 0}, "colour": "red"}


def test_worker_defaults_to_empty() -> None:
    assert define_deployment(name="erp", modules=[]).worker == {}


def test_lookups_find_members_by_qualified_name() -> None:
    deployment = define_deployment(name="erp", modules=[SALES, HOTEL])
    assert deployment.module("hotel") is HOTEL
    assert deployment.module("billing") is None
    assert deployment.job("hotel.audit") is HOTEL.jobs["audit"]
    assert deployment.job("sales.confirm") is None
    assert deployment.job("nope") is None
    assert deployment.function("sales.confirm") is SALES.functions["confirm"]
    assert deployment.function("sales.send") is None
    assert [j.qualified_name for j in deployment.jobs()] == ["sales.send", "hotel.audit"]
    assert [f.qualified_name for f in deployment.functions()] == ["sales.confirm"]
    assert [m.qualified_name for m in deployment.models()] == ["sales.Order"]


def test_modules_list_containing_a_string_names_file_and_line() -> None:
    with pytest.raises(DeclarationError) as raised:
        define_deployment(name="erp", modules=[SALES, "hotel"])  # type: ignore[list-item]  # str-item
    assert raised.value.message == (
        f"{marked('str-item', __file__).render()}: deployment 'erp': modules must be made with "
        "define_module(...), got 'hotel'"
    )


@pytest.mark.parametrize("modules", ["sales", b"sales", SALES, {"sales": SALES}])
def test_modules_not_a_list_is_refused(modules: Any) -> None:
    with pytest.raises(DeclarationError) as raised:
        define_deployment(name="erp", modules=modules)  # modules-not-list
    assert raised.value.message.startswith(
        f"{marked('modules-not-list', __file__).render()}: deployment 'erp': modules must be a "
        "list of define_module(...), got "
    )


@pytest.mark.parametrize("worker", [[("queues", {})], "queues", 3])
def test_worker_not_a_dict_is_refused_naming_it(worker: Any) -> None:
    with pytest.raises(DeclarationError) as raised:
        define_deployment(name="erp", modules=[SALES], worker=worker)  # worker-not-dict
    assert raised.value.message == (
        f"{marked('worker-not-dict', __file__).render()}: deployment 'erp': worker must be a "
        f"dict, got {worker!r}"
    )


def test_deployment_name_not_a_string_is_refused() -> None:
    with pytest.raises(DeclarationError) as raised:
        define_deployment(name=None, modules=[])  # type: ignore[arg-type]  # name-none
    assert raised.value.message == (
        f"{marked('name-none', __file__).render()}: deployment name must be a string, got None"
    )


def test_the_redact_hook_is_kept_as_given() -> None:
    def hook(text: str) -> str:
        return text.replace("4111", "****")

    assert define_deployment(name="erp", modules=[SALES], redact=hook).redact is hook
    assert define_deployment(name="erp", modules=[SALES]).redact is None


def test_a_redact_hook_that_is_not_callable_is_refused_naming_it() -> None:
    with pytest.raises(DeclarationError) as raised:
        hook: Any = "***"
        define_deployment(name="erp", modules=[SALES], redact=hook)  # redact-str
    assert raised.value.message == (
        f"{marked('redact-str', __file__).render()}: deployment 'erp': redact must be a "
        "function taking the text of an exception and returning the text to keep, got '***'"
    )
