"""define_module: members learn their module and name; structural mistakes fail at the call."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_function, define_job, define_model, define_module
from ket.errors import DeclarationError

from .location import marked


def handle(ctx: object, input: object) -> None:
    """A handler."""


def test_define_module_binds_module_and_name_onto_each_member() -> None:
    module = define_module(
        name="sales",
        models={"Order": define_model({"number": "string"})},
        functions={"confirm": define_function(handler=handle)},
        jobs={"send": define_job(handler=handle, idempotent=True)},
    )
    assert (module.models["Order"].module, module.models["Order"].name) == ("sales", "Order")
    assert module.models["Order"].qualified_name == "sales.Order"
    assert module.functions["confirm"].qualified_name == "sales.confirm"
    assert module.jobs["send"].qualified_name == "sales.send"
    assert module.jobs["send"].title == "sales.send"


def test_binding_leaves_the_declaration_as_written_unbound() -> None:
    job = define_job(handler=handle, idempotent=True, max_attempts=3)
    module = define_module(name="sales", jobs={"send": job})
    assert (job.module, job.name, job.title) == ("", "", "<unbound>")
    assert module.jobs["send"].max_attempts == 3
    assert module.jobs["send"].source == job.source


def test_one_declaration_can_be_bound_under_two_names() -> None:
    job = define_job(handler=handle, idempotent=True)
    module = define_module(name="sales", jobs={"a": job, "b": job})
    assert [j.qualified_name for j in module.jobs.values()] == ["sales.a", "sales.b"]


def test_missing_member_kinds_are_empty() -> None:
    module = define_module(name="company")
    assert (module.models, module.functions, module.jobs) == ({}, {}, {})


def test_source_locations_point_at_each_define_call_line() -> None:
    module = define_module(  # module-call
        name="sales",
        models={
            "Order": define_model({"number": "string"}),  # model-call
        },
        jobs={
            "send": define_job(  # job-call
                handler=handle,
                idempotent=True,
            ),
        },
    )
    assert module.source == marked("module-call", __file__)
    assert module.models["Order"].source == marked("model-call", __file__)
    assert module.jobs["send"].source == marked("job-call", __file__)


def test_jobs_value_not_made_with_define_job_names_file_and_line() -> None:
    fn = define_function(handler=handle)
    with pytest.raises(DeclarationError) as raised:
        define_module(name="sales", jobs={"send": fn})  # type: ignore[dict-item]  # jobs-value
    where = marked("jobs-value", __file__).render()
    assert raised.value.message.startswith(
        f"{where}: module 'sales': jobs['send'] must be made with define_job(...), "
        "got FunctionDecl("
    )


def test_functions_value_made_with_define_job_is_refused() -> None:
    job = define_job(handler=handle, idempotent=True)
    with pytest.raises(DeclarationError) as raised:
        define_module(name="sales", functions={"confirm": job})  # type: ignore[dict-item]  # functions-value
    where = marked("functions-value", __file__).render()
    assert raised.value.message.startswith(
        f"{where}: module 'sales': functions['confirm'] must be made with define_function(...)"
    )


def test_models_value_as_plain_dict_is_refused_naming_it() -> None:
    with pytest.raises(DeclarationError) as raised:
        define_module(name="sales", models={"Order": {"number": "string"}})  # type: ignore[dict-item]  # models-value
    assert raised.value.message == (
        f"{marked('models-value', __file__).render()}: module 'sales': models['Order'] must be "
        "made with define_model(...), got {'number': 'string'}"
    )


@pytest.mark.parametrize("members", [[define_job(handler=handle)], "send", 3])
def test_jobs_not_a_dict_is_refused(members: Any) -> None:
    with pytest.raises(DeclarationError) as raised:
        define_module(name="sales", jobs=members)  # jobs-not-dict
    assert raised.value.message.startswith(
        f"{marked('jobs-not-dict', __file__).render()}: module 'sales': jobs must be a dict of "
        "name to define_job(...), got "
    )
    assert repr(members) in raised.value.message


def test_module_name_not_a_string_is_refused() -> None:
    with pytest.raises(DeclarationError) as raised:
        define_module(name=7)  # type: ignore[arg-type]  # name-not-str
    assert raised.value.message == (
        f"{marked('name-not-str', __file__).render()}: module name must be a string, got 7"
    )
