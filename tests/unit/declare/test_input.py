"""Input declarations: shorthand types validate and refuse the right values; classes pass."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from ket.declare import build_input_model
from ket.declare.input import required_fields
from ket.errors import DeclarationError, InputSpecError

AWARE = dt.datetime(2025, 3, 30, 1, 30, tzinfo=dt.UTC)
NAIVE = dt.datetime(2025, 3, 30, 1, 30)


class OrderInput(BaseModel):
    order_id: str


def one_field(type_name: str) -> type[BaseModel]:
    return build_input_model({"value": type_name}, "t")


@pytest.mark.parametrize(
    ("type_name", "value", "expected"),
    [
        ("id", "ord_1", "ord_1"),
        ("string", "", ""),
        ("int", -3, -3),
        ("int", 10**12, 10**12),
        ("number", 1.5, 1.5),
        ("number", 2, 2.0),
        ("bool", True, True),
        ("bool", False, False),
        ("datetime", AWARE, AWARE),
        ("datetime", "2025-03-30T01:30:00Z", AWARE),
        ("datetime", "2025-03-30T08:30:00+07:00", AWARE),
        ("date", dt.date(2025, 2, 28), dt.date(2025, 2, 28)),
        ("date", "2025-02-28", dt.date(2025, 2, 28)),
        ("json", {"a": [1, None, "x"]}, {"a": [1, None, "x"]}),
        ("json", None, None),
        ("json", "text", "text"),
    ],
)
def test_shorthand_type_accepts_its_values(type_name: str, value: Any, expected: Any) -> None:
    validated = one_field(type_name).model_validate({"value": value})
    assert validated.value == expected  # type: ignore[attr-defined]
    assert type(validated.value) is type(expected)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("type_name", "bad"),
    [
        ("id", ["", 5, None]),
        ("string", [5, None, ["x"]]),
        ("int", [1.5, "one", None]),
        ("number", ["many", None, [1]]),
        ("bool", ["maybe", None, 2]),
        ("datetime", [NAIVE, "2025-03-30T01:30:00", "yesterday", None]),
        ("date", ["2025-02-30", "soon", None]),
        ("json", [object(), {1, 2}]),
    ],
)
def test_shorthand_type_refuses_wrong_values_naming_the_field(
    type_name: str, bad: list[Any]
) -> None:
    model = one_field(type_name)
    for value in bad:
        with pytest.raises(ValidationError) as raised:
            model.model_validate({"value": value})
        assert raised.value.errors()[0]["loc"][0] == "value", value


def test_datetime_requires_a_timezone_aware_value() -> None:
    model = build_input_model({"at": "datetime"}, "t")
    assert model.model_validate({"at": AWARE}).at == AWARE  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="timezone"):
        model.model_validate({"at": NAIVE})


def test_values_are_converted_to_the_declared_type() -> None:
    model = build_input_model({"day": "date", "total": "number", "n": "int"}, "t")
    value = model.model_validate({"day": "2025-01-31", "total": 2, "n": 3})
    assert value.model_dump() == {"day": dt.date(2025, 1, 31), "total": 2.0, "n": 3}
    assert isinstance(value.total, float)  # type: ignore[attr-defined]


def test_question_mark_makes_a_field_optional_defaulting_to_none() -> None:
    model = build_input_model({"order_id": "id", "note": "string?", "count": "int?"}, "t")
    value = model.model_validate({"order_id": "o1"})
    assert value.model_dump() == {"order_id": "o1", "note": None, "count": None}
    assert model.model_validate({"order_id": "o1", "count": 2}).count == 2  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        model.model_validate({"order_id": "o1", "count": "two"})


def test_missing_required_field_is_named() -> None:
    model = build_input_model({"order_id": "id", "note": "string?"}, "t")
    with pytest.raises(ValidationError) as raised:
        model.model_validate({"note": "x"})
    assert [(e["type"], e["loc"]) for e in raised.value.errors()] == [("missing", ("order_id",))]


def test_unknown_fields_are_refused() -> None:
    model = build_input_model({"order_id": "id"}, "t")
    with pytest.raises(ValidationError) as raised:
        model.model_validate({"order_id": "o1", "orderid": "o1"})
    assert [(e["type"], e["loc"]) for e in raised.value.errors()] == [
        ("extra_forbidden", ("orderid",))
    ]


def test_no_input_is_an_empty_model_that_refuses_fields() -> None:
    model = build_input_model(None, "t")
    assert model.model_validate({}).model_dump() == {}
    with pytest.raises(ValidationError):
        model.model_validate({"x": 1})


def test_pydantic_class_passes_through_unchanged() -> None:
    assert build_input_model(OrderInput, "sales.send") is OrderInput


def test_shorthand_model_is_frozen() -> None:
    value = build_input_model({"n": "int"}, "t").model_validate({"n": 1})
    with pytest.raises(ValidationError):
        value.n = 2  # type: ignore[attr-defined]


def test_json_schema_has_the_title_and_required_fields() -> None:
    schema = build_input_model(
        {"b": "int", "a": "id", "c": "string?"}, "sales.send"
    ).model_json_schema()
    assert schema["title"] == "sales.send"
    assert schema["required"] == ["b", "a"]
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) == {"a", "b", "c"}


def test_required_fields_are_sorted_names_without_optional_ones() -> None:
    model = build_input_model({"b": "int", "a": "id", "c": "string?"}, "t")
    assert required_fields(model) == ["a", "b"]
    assert required_fields(OrderInput) == ["order_id"]


def test_unknown_type_is_refused_naming_field_and_type() -> None:
    with pytest.raises(InputSpecError) as raised:
        build_input_model({"to": "strng"}, "t")
    assert raised.value.message == (
        "input field 'to' has unknown type 'strng'; "
        "known types: id, string, int, number, bool, datetime, date, json, secret"
    )


@pytest.mark.parametrize("name", ["bad-name", "2nd", "_private", "class", "", "with space"])
def test_field_name_that_is_not_an_identifier_is_refused(name: str) -> None:
    with pytest.raises(InputSpecError) as raised:
        build_input_model({name: "string"}, "t")
    assert raised.value.message == (
        f"input field name {name!r} must be an identifier starting with a letter"
    )


@pytest.mark.parametrize("name", ["model_dump", "model_config", "model_fields", "json", "copy"])
def test_field_name_pydantic_reserves_is_refused(name: str) -> None:
    with pytest.raises(InputSpecError) as raised:
        build_input_model({name: "string"}, "t")
    assert repr(name) in raised.value.message


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        (["order_id"], "['order_id']"),
        ("order_id", "'order_id'"),
        (42, "42"),
        (OrderInput(order_id="x"), "OrderInput"),
    ],
)
def test_input_that_is_neither_dict_nor_model_class_is_refused(spec: Any, value: str) -> None:
    with pytest.raises(InputSpecError) as raised:
        build_input_model(spec, "t")
    assert "must be a dict of field types or a pydantic model class" in raised.value.message
    assert value in raised.value.message


def test_input_spec_error_is_a_declaration_error() -> None:
    with pytest.raises(DeclarationError):
        build_input_model({"a": 1}, "t")


def test_a_secret_field_holds_a_secret_string_never_shown() -> None:
    model = build_input_model({"api_key": "secret", "note": "secret?"}, "t")
    value = model.model_validate({"api_key": "sk-live-1"})
    assert value.api_key.get_secret_value() == "sk-live-1"  # type: ignore[attr-defined]
    assert value.note is None  # type: ignore[attr-defined]
    assert "sk-live-1" not in repr(value)
    assert "sk-live-1" not in str(value.model_dump(mode="json"))
    assert required_fields(model) == ["api_key"]


def test_a_secret_field_is_marked_write_only_in_the_json_schema() -> None:
    schema = build_input_model({"api_key": "secret", "note": "secret?"}, "t").model_json_schema()
    secret = {"format": "password", "type": "string", "writeOnly": True}
    assert schema["properties"]["api_key"] == {**secret, "title": "Api Key"}
    assert schema["properties"]["note"]["anyOf"] == [secret, {"type": "null"}]


def test_secret_refuses_what_is_not_a_string() -> None:
    with pytest.raises(ValidationError, match="api_key"):
        build_input_model({"api_key": "secret"}, "t").model_validate({"api_key": 12345})
