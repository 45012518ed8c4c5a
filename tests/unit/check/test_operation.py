"""Operation checks: idempotency, attempts, timeout, priority, handler, backoff, flags and input."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ket import define_function, define_job
from ket.check import run_checks
from ket.declare import default_backoff_seconds

from .build import deployment_of, error, handle

KNOWN_TYPES = "id, string, int, number, bool, datetime, date, json, secret"  # input types


def only_ctx(ctx):  # type: ignore[no-untyped-def]  # unannotated: the message shows (ctx)
    """Too few parameters for (ctx, input)."""


def three_required(ctx: object, input: object, extra: object) -> None:
    """A third parameter nobody supplies."""


def keyword_only_required(ctx: object, input: object, *, tenant: str) -> None:
    """A keyword-only parameter nobody supplies."""


def with_defaults(ctx: object, input: object, retries: int = 3, *, log: object = None) -> None:
    """Extra parameters that all have defaults."""


def variadic(*args: object) -> None:
    """Takes anything positional."""


async def async_handle(ctx: object, input: object) -> None:
    """An async handler."""


class CallableHandler:
    def __call__(self, ctx: object, input: object) -> None:
        """An instance with __call__(ctx, input)."""


class OrderInput(BaseModel):
    order_id: str


def not_idempotent() -> str:
    return "job is not declared idempotent; delivery is at least once"


# KET101 / KET108: idempotent


def test_job_not_declared_idempotent_is_KET101() -> None:
    job = define_job(handler=handle)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error("KET101", not_idempotent(), obj="job sales.send", source=job.source)
    ]


def test_job_declared_idempotent_false_is_KET101() -> None:
    job = define_job(handler=handle, idempotent=False)
    assert [m.id for m in run_checks(deployment_of(jobs={"send": job}))] == ["KET101"]


def test_job_declared_idempotent_is_silent() -> None:
    job = define_job(handler=handle, idempotent=True)
    assert run_checks(deployment_of(jobs={"send": job})) == []


def test_idempotent_yes_is_KET108_not_KET101() -> None:
    job = define_job(handler=handle, idempotent="yes")  # type: ignore[arg-type]
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET108",
            "idempotent must be True or False, got 'yes'",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_idempotent_one_is_KET108() -> None:
    job = define_job(handler=handle, idempotent=1)  # type: ignore[arg-type]
    found = run_checks(deployment_of(jobs={"send": job}))
    assert [(m.id, m.msg) for m in found] == [("KET108", "idempotent must be True or False, got 1")]


def test_cross_company_not_a_bool_is_KET108() -> None:
    fn = define_function(handler=handle, cross_company="yes")  # type: ignore[arg-type]
    assert run_checks(deployment_of(functions={"confirm": fn})) == [
        error(
            "KET108",
            "cross_company must be True or False, got 'yes'",
            obj="function sales.confirm",
            source=fn.source,
        )
    ]


def test_cross_company_true_is_silent() -> None:
    fn = define_function(handler=handle, cross_company=True)
    job = define_job(handler=handle, idempotent=True, cross_company=True)
    assert run_checks(deployment_of(functions={"confirm": fn}, jobs={"send": job})) == []


# KET102: max_attempts


@pytest.mark.parametrize("value", [0, -1, "five", 2.0, True, None])
def test_max_attempts_not_a_positive_integer_is_KET102(value: Any) -> None:
    job = define_job(handler=handle, idempotent=True, max_attempts=value)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET102",
            f"max_attempts must be a positive integer, got {value!r}",
            obj="job sales.send",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("value", [1, 20, 1_000])
def test_max_attempts_positive_is_silent(value: int) -> None:
    job = define_job(handler=handle, idempotent=True, max_attempts=value)
    assert run_checks(deployment_of(jobs={"send": job})) == []


# KET103: timeout_ms


@pytest.mark.parametrize("value", [0, -5, "30s", 1.5, False])
def test_timeout_not_a_positive_integer_is_KET103(value: Any) -> None:
    job = define_job(handler=handle, idempotent=True, timeout_ms=value)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET103",
            f"timeout_ms must be a positive integer, got {value!r}",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_timeout_of_one_millisecond_is_silent() -> None:
    job = define_job(handler=handle, idempotent=True, timeout_ms=1)
    assert run_checks(deployment_of(jobs={"send": job})) == []


# KET104: priority


@pytest.mark.parametrize("value", [1.5, "1", None, True])
def test_priority_not_an_integer_is_KET104(value: Any) -> None:
    job = define_job(handler=handle, idempotent=True, priority=value)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET104",
            f"priority must be an integer, got {value!r}",
            obj="job sales.send",
            source=job.source,
        )
    ]


@pytest.mark.parametrize("value", [-3, 0, 10])
def test_integer_priority_negative_or_not_is_silent(value: int) -> None:
    job = define_job(handler=handle, idempotent=True, priority=value)
    assert run_checks(deployment_of(jobs={"send": job})) == []


# KET105 / KET106: handler


def test_job_handler_not_callable_is_KET105() -> None:
    job = define_job(handler="send_mail", idempotent=True)  # type: ignore[arg-type]
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET105",
            "handler 'send_mail' is not callable",
            obj="job sales.send",
            source=job.source,
        )
    ]


def test_function_handler_not_callable_is_KET105() -> None:
    fn = define_function(handler=None)  # type: ignore[arg-type]
    assert run_checks(deployment_of(functions={"confirm": fn})) == [
        error(
            "KET105", "handler None is not callable", obj="function sales.confirm", source=fn.source
        )
    ]


def test_handler_with_one_parameter_is_KET106() -> None:
    job = define_job(handler=only_ctx, idempotent=True)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET106",
            f"handler {__name__}:only_ctx(ctx) cannot be called with (ctx, input)",
            obj="job sales.send",
            source=job.source,
        )
    ]


@pytest.mark.parametrize(
    "handler", [three_required, keyword_only_required, lambda: None], ids=lambda h: h.__name__
)
def test_handler_needing_other_arguments_is_KET106(handler: Any) -> None:
    fn = define_function(handler=handler)
    found = run_checks(deployment_of(functions={"confirm": fn}))
    assert [(m.id, m.obj, m.source) for m in found] == [
        ("KET106", "function sales.confirm", fn.source)
    ]
    assert handler.__qualname__ in found[0].msg


@pytest.mark.parametrize(
    "handler",
    [handle, with_defaults, variadic, async_handle, CallableHandler(), lambda ctx, input: None],
    ids=["plain", "extra-defaults", "variadic", "async", "callable-instance", "lambda"],
)
def test_handler_that_takes_ctx_and_input_is_silent(handler: Any) -> None:
    job = define_job(handler=handler, idempotent=True)
    fn = define_function(handler=handler)
    assert run_checks(deployment_of(jobs={"send": job}, functions={"confirm": fn})) == []


# KET107: backoff


def test_backoff_not_callable_is_KET107() -> None:
    job = define_job(handler=handle, idempotent=True, backoff=30)  # type: ignore[arg-type]
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET107",
            "backoff 30 cannot be called as backoff(attempt)",
            obj="job sales.send",
            source=job.source,
        )
    ]


@pytest.mark.parametrize(
    ("backoff", "shown"),
    [
        (lambda: 1.0, "<lambda>()"),
        (lambda attempt, base: 1.0, "<lambda>(attempt, base)"),
    ],
    ids=["no-params", "two-params"],
)
def test_backoff_that_cannot_take_attempt_is_KET107(backoff: Any, shown: str) -> None:
    job = define_job(handler=handle, idempotent=True, backoff=backoff)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET107",
            f"backoff {__name__}:{shown} cannot be called as backoff(attempt)",
            obj="job sales.send",
            source=job.source,
        )
    ]


@pytest.mark.parametrize(
    "backoff",
    [lambda attempt: 5.0, default_backoff_seconds, lambda attempt, base=2: 1.0],
    ids=["lambda", "default", "extra-default"],
)
def test_backoff_taking_attempt_is_silent(backoff: Any) -> None:
    job = define_job(handler=handle, idempotent=True, backoff=backoff)
    assert run_checks(deployment_of(jobs={"send": job})) == []


# KET109, KET110: input versions and their upgrades


@pytest.mark.parametrize("version", [0, -1, True, 2.0, "2", 2**31], ids=repr)
def test_input_version_not_a_positive_32_bit_integer_is_KET109(version: Any) -> None:
    job = define_job(handler=handle, idempotent=True, input_version=version)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error(
            "KET109",
            f"input_version must be an integer from 1 to 2147483647, got {version!r}",
            obj="job sales.send",
            source=job.source,
        )
    ]


def _add_one(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "n": 1}


@pytest.mark.parametrize(
    ("version", "upgrade", "problems"),
    [
        (2, [_add_one], ["upgrade must be a dict of input version to function, got [<function"]),
        (2, {2: _add_one}, ["upgrade key 2 is not an input version below input_version 2"]),
        (2, {0: _add_one, 1: _add_one}, ["upgrade key 0 is not an input version below"]),
        (2, {"1": _add_one}, ["upgrade key '1' is not an input version below input_version 2"]),
        (2, {1: "add_one"}, ["upgrade from version 1: 'add_one' cannot be called as fn(payload)"]),
        (2, {1: lambda: 1}, ["upgrade from version 1: ", "<lambda>() cannot be called"]),
        (
            4,
            {1: _add_one, 3: _add_one},
            [
                "upgrade has no step from version 2: payloads of version 1 cannot reach "
                "input_version 4"
            ],
        ),
    ],
    ids=["not-a-dict", "key-too-high", "key-zero", "key-text", "not-callable", "no-arg", "gap"],
)
def test_an_upgrade_that_cannot_reach_the_input_version_is_KET110(
    version: int, upgrade: Any, problems: list[str]
) -> None:
    job = define_job(handler=handle, idempotent=True, input_version=version, upgrade=upgrade)
    [found] = run_checks(deployment_of(jobs={"send": job}))
    assert (found.id, found.obj) == ("KET110", "job sales.send")
    assert all(part in found.msg for part in problems), found.msg


def test_versions_with_upgrades_from_each_older_version_kept_are_silent() -> None:
    jobs = {
        "first": define_job(handler=handle, idempotent=True, input_version=1),
        "second": define_job(handler=handle, idempotent=True, input_version=2, upgrade={}),
        "third": define_job(
            handler=handle, idempotent=True, input_version=3, upgrade={1: _add_one, 2: _add_one}
        ),
        "dropped_v1": define_job(
            handler=handle, idempotent=True, input_version=3, upgrade={2: _add_one}
        ),
    }
    assert run_checks(deployment_of(jobs=jobs)) == []


# KET501: input


@pytest.mark.parametrize(
    ("spec", "msg"),
    [
        (
            {"to": "strng"},
            f"input field 'to' has unknown type 'strng'; known types: {KNOWN_TYPES}",
        ),
        (
            {"bad-name": "string"},
            "input field name 'bad-name' must be an identifier starting with a letter",
        ),
        (
            {"class": "string"},
            "input field name 'class' must be an identifier starting with a letter",
        ),
        ({"to": 5}, "input field 'to' must have a type name string, got 5"),
        (
            ["to"],
            "input must be a dict of field types or a pydantic model class, got ['to']",
        ),
        (
            {"model_dump": "string"},
            "input field name 'model_dump' is taken by pydantic's BaseModel; choose another name",
        ),
        (
            {"json": "json"},
            "input field name 'json' is taken by pydantic's BaseModel; choose another name",
        ),
    ],
    ids=["unknown-type", "dash", "keyword", "non-string-type", "list", "model_dump", "json"],
)
def test_input_that_cannot_compile_is_KET501(spec: Any, msg: str) -> None:
    job = define_job(handler=handle, idempotent=True, input=spec)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error("KET501", msg, obj="job sales.send", source=job.source)
    ]


@pytest.mark.parametrize(
    ("spec", "msg"),
    [
        (
            {"total": "numbr"},
            f"output field 'total' has unknown type 'numbr'; known types: {KNOWN_TYPES}",
        ),
        ("total", "output must be a dict of field types or a pydantic model class, got 'total'"),
    ],
    ids=["unknown-type", "string"],
)
def test_output_that_cannot_compile_is_KET503(spec: Any, msg: str) -> None:
    job = define_job(handler=handle, idempotent=True, output=spec)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error("KET503", msg, obj="job sales.send", source=job.source)
    ]


def test_function_input_that_cannot_compile_is_KET501() -> None:
    fn = define_function(handler=handle, input={"order_id": "uuid"})
    found = run_checks(deployment_of(functions={"confirm": fn}))
    assert [(m.id, m.obj) for m in found] == [("KET501", "function sales.confirm")]
    assert "'uuid'" in found[0].msg


@pytest.mark.parametrize(
    "spec",
    [{"to": "string"}, {"to": "string?", "at": "datetime", "n": "int?"}, OrderInput, None, {}],
    ids=["shorthand", "mixed", "pydantic", "none", "empty"],
)
def test_input_that_compiles_is_silent(spec: Any) -> None:
    job = define_job(handler=handle, idempotent=True, input=spec)
    fn = define_function(handler=handle, input=spec)
    assert run_checks(deployment_of(jobs={"send": job}, functions={"confirm": fn})) == []


def test_every_problem_of_one_job_is_reported_in_id_order() -> None:
    job = define_job(handler=only_ctx, max_attempts=0, timeout_ms=-5, priority=1.5)  # type: ignore[arg-type]
    assert [m.id for m in run_checks(deployment_of(jobs={"send": job}))] == [
        "KET101",
        "KET102",
        "KET103",
        "KET104",
        "KET106",
    ]


# KET111: tags


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ("billing", "tags must be a list of strings, got 'billing'"),
        (["ok", 7], "a tag must be a string, got 7"),
        (["  "], "a tag must be 1 to 100 characters without NUL, got '  '"),
        (["x" * 101], f"a tag must be 1 to 100 characters without NUL, got {'x' * 101!r}"),
        ([f"t{n}" for n in range(33)], "a job carries at most 32 tags, got 33"),
    ],
)
def test_tags_that_are_not_a_short_list_of_strings_are_KET111(tags: Any, message: str) -> None:
    job = define_job(handler=handle, idempotent=True, tags=tags)
    assert run_checks(deployment_of(jobs={"send": job})) == [
        error("KET111", message, obj="job sales.send", source=job.source)
    ]


def test_tags_repeated_or_padded_are_silent() -> None:
    job = define_job(handler=handle, idempotent=True, tags=[" billing", "billing", "eu"])
    assert run_checks(deployment_of(jobs={"send": job})) == []
