"""Input schemas compared field by field, on schemas pydantic really generates."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, SecretStr

from ket.diff import diff_manifests
from ket.diff.rule import Finding
from ket.diff.schema import describe, inline_refs, input_findings, schema_diff

from .build import change, function, job, manifest, schema

QUEUED = "rows already queued"


def findings(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, message) of each finding between two input schemas of a job."""
    return [(f.kind, f.message) for f in input_findings(old, new, who=QUEUED)]


def test_new_required_input_field_is_breaking_for_a_job() -> None:
    old, new = schema(order_id=(int, ...)), schema(order_id=(int, ...), email=(str, ...))
    before = manifest(jobs={"sales.send": job(input=old)})
    after = manifest(jobs={"sales.send": job(input=new)})
    assert diff_manifests(before, after) == [
        change(
            "breaking",
            "input_field_added_required",
            "job sales.send",
            "input gains required field 'email' (string); "
            "rows already queued without it would fail validation",
            new={"title": "Email", "type": "string"},
        ),
    ]


def test_new_required_input_field_of_a_function_is_for_review() -> None:
    old, new = schema(order_id=(int, ...)), schema(order_id=(int, ...), email=(str, ...))
    before = manifest(functions={"sales.confirm": function(input=old)})
    after = manifest(functions={"sales.confirm": function(input=new)})
    assert diff_manifests(before, after) == [
        change(
            "review",
            "input_field_added_required",
            "function sales.confirm",
            "input gains required field 'email' (string); "
            "existing calls without it would fail validation",
            new={"title": "Email", "type": "string"},
        ),
    ]


def test_new_optional_input_field_is_safe() -> None:
    old, new = schema(order_id=(int, ...)), schema(order_id=(int, ...), note=(str | None, None))
    assert findings(old, new) == [
        ("input_field_added", "input gains optional field 'note' (string or null)"),
    ]


def test_optional_field_becoming_required_is_breaking() -> None:
    old, new = schema(note=(str | None, None)), schema(note=(str, ...))
    assert findings(old, new) == [
        (
            "input_field_required",
            "input field 'note' becomes required; "
            "rows already queued without it would fail validation",
        ),
    ]


def test_required_field_becoming_optional_is_safe_and_not_a_type_change() -> None:
    old, new = schema(note=(str, ...)), schema(note=(str | None, None))
    assert findings(old, new) == [("input_field_optional", "input field 'note' becomes optional")]


def test_field_type_change_is_breaking() -> None:
    old, new = schema(qty=(int, ...)), schema(qty=(str, ...))
    assert findings(old, new) == [
        (
            "input_field_type_changed",
            "input field 'qty' changes type from integer to string; "
            "rows already queued with the old type would fail validation",
        ),
    ]


def test_tightened_constraint_is_a_type_change_named_by_its_path() -> None:
    old = schema(code=(str, Field(max_length=8)))
    new = schema(code=(str, Field(max_length=5)))
    assert findings(old, new) == [
        (
            "input_field_type_changed",
            "input field 'code' changes type at maxLength; "
            "rows already queued with the old type would fail validation",
        ),
    ]


def test_field_that_no_longer_accepts_null_is_breaking() -> None:
    old, new = schema(note=(str | None, None)), schema(note=(str, "none"))
    assert findings(old, new) == [
        (
            "input_field_type_changed",
            "input field 'note' no longer accepts null; rows already queued with null would fail",
        ),
    ]


def test_field_that_now_accepts_null_is_safe() -> None:
    old, new = schema(note=(str, ...)), schema(note=(str | None, ...))
    assert findings(old, new) == [("input_field_nullable", "input field 'note' now accepts null")]


def test_annotations_alone_are_not_a_type_change() -> None:
    old = schema(qty=(int, Field(1, description="how many", examples=[1])))
    new = schema(qty=(int, Field(2, title="Quantity", description="count")))
    assert findings(old, new) == [
        (
            "input_field_annotation_changed",
            "input field 'qty' changes only its annotations "
            "(default, description, examples, title)",
        ),
    ]


def test_removed_field_is_breaking_when_unknown_fields_are_refused() -> None:
    old, new = schema(qty=(int, ...), note=(str, ...)), schema(qty=(int, ...))
    assert findings(old, new) == [
        (
            "input_field_removed",
            "input field 'note' removed and unknown fields are refused; "
            "rows already queued that carry it would fail validation",
        ),
    ]


def test_removed_field_is_safe_when_unknown_fields_are_ignored() -> None:
    old = schema(qty=(int, ...), note=(str, ...), extra="ignore")
    new = schema(qty=(int, ...), extra="ignore")
    assert findings(old, new) == [
        (
            "input_field_removed_tolerated",
            "input field 'note' removed; unknown fields are accepted, so nothing fails",
        ),
    ]


def test_refusing_unknown_fields_is_for_review_and_accepting_them_is_safe() -> None:
    open_, closed = schema(qty=(int, ...), extra="ignore"), schema(qty=(int, ...))
    assert findings(open_, closed) == [
        (
            "input_closed",
            "input now refuses unknown fields; rows already queued that carry any would fail "
            "validation",
        ),
    ]
    assert findings(closed, open_) == [("input_opened", "input now accepts unknown fields")]


class Address(BaseModel):
    city: str
    zip: str


def test_field_type_change_inside_a_referenced_model_is_breaking() -> None:
    class Address(BaseModel):  # same name, one field changed: the $ref text is identical
        city: str
        zip: int

    old, new = schema(ship_to=(globals()["Address"], ...)), schema(ship_to=(Address, ...))
    assert old["properties"] == new["properties"]
    assert findings(old, new) == [
        (
            "input_field_type_changed",
            "input field 'ship_to' changes type at properties.zip.type; "
            "rows already queued with the old type would fail validation",
        ),
    ]


def test_referenced_model_renamed_with_the_same_fields_is_no_type_change() -> None:
    class Location(BaseModel):
        city: str
        zip: str

    old, new = schema(ship_to=(Address, ...)), schema(ship_to=(Location, ...))
    assert findings(old, new) == [
        (
            "input_field_annotation_changed",
            "input field 'ship_to' changes only its annotations (title)",
        ),
    ]


def test_recursive_model_is_compared_without_looping() -> None:
    class Node(BaseModel):
        name: str
        children: list[Node] = []

    class Tree(BaseModel):
        name: int
        children: list[Tree] = []

    old, new = schema(root=(Node, ...)), schema(root=(Tree, ...))
    assert [kind for kind, _ in findings(old, new)] == ["input_field_type_changed"]
    assert inline_refs(old)["properties"]["root"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Node"
    }


def test_field_named_like_an_annotation_keyword_still_counts() -> None:
    old, new = schema(title=(str, ...)), schema(title=(int, ...))
    assert [kind for kind, _ in findings(old, new)] == ["input_field_type_changed"]


def test_order_of_alternatives_and_of_required_is_not_a_change() -> None:
    old = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
    }
    new = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    assert schema_diff(old, new) == []
    assert schema_diff({"required": ["a", "b"]}, {"required": ["b", "a"]}) == []
    assert (
        schema_diff(
            {"prefixItems": [{"type": "a"}, {"type": "b"}]},
            {"prefixItems": [{"type": "b"}, {"type": "a"}]},
        )
        != []
    )


def test_schema_replaced_by_one_that_is_not_an_object_of_fields_is_breaking() -> None:
    old, new = schema(qty=(int, ...)), {"type": "array", "items": {"type": "integer"}}
    assert input_findings(old, new, who=QUEUED) == [
        Finding(
            kind="input_schema_replaced",
            message="input schema replaced by one that cannot be compared field by field; "
            "rows already queued may fail validation",
            old=old,
            new=new,
        ),
    ]


def test_title_only_change_of_the_whole_schema_is_still_reported_as_safe() -> None:
    before = manifest(jobs={"sales.send": job(input=schema("sales.send"))})
    after = manifest(jobs={"sales.send": job(input=schema("sales.send_v2"))})
    changes = diff_manifests(before, after)
    assert [(c.severity, c.kind, c.message) for c in changes] == [
        ("safe", "field_changed", "input changed")
    ]


def test_several_field_changes_are_each_reported_in_field_order() -> None:
    old = schema(a=(int, ...), b=(str | None, None), c=(str, ...))
    new = schema(a=(str, ...), b=(str, ...), d=(int, ...))
    assert [kind for kind, _ in findings(old, new)] == [
        "input_field_added_required",
        "input_field_removed",
        "input_field_type_changed",
        "input_field_required",
    ]


def test_describe_names_types_the_way_people_read_them() -> None:
    assert describe({"type": "string", "format": "ket-id", "minLength": 1}) == "string (ket-id)"
    assert describe({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == "integer or null"
    assert describe({"type": "array", "items": {"type": "integer"}}) == "array of integer"
    assert describe({"type": "object", "title": "Address"}) == "Address"


def test_alternatives_listed_in_another_order_are_a_safe_rewrite() -> None:
    old = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "integer"}, {"type": "string"}]}},
    }
    new = {
        "type": "object",
        "properties": {"x": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
    }
    assert findings(old, new) == [
        (
            "input_field_annotation_changed",
            "input field 'x' is written differently with the same meaning",
        ),
    ]


def test_annotation_changes_are_named_even_inside_lists_and_nested_fields() -> None:
    class Old(BaseModel):
        title: str = Field(examples=["a"])

    class New(BaseModel):
        title: str = Field(examples=["b"], description="the title")

    old, new = schema(inner=(Old, ...)), schema(inner=(New, ...))
    assert findings(old, new) == [
        (
            "input_field_annotation_changed",
            "input field 'inner' changes only its annotations (description, examples, title)",
        ),
    ]


def test_a_field_becoming_secret_is_safe_and_not_a_type_change() -> None:
    old, new = schema(api_key=(str, ...)), schema(api_key=(SecretStr, ...))
    before = manifest(jobs={"v.use": job(input=old)})
    after = manifest(jobs={"v.use": job(input=new)})
    [found] = diff_manifests(before, after)
    assert (found.severity, found.kind, found.message) == (
        "safe",
        "input_field_secret",
        "input 'api_key' becomes secret: shown as ***, sealed at rest when keys are set",
    )


def test_a_field_no_longer_secret_is_for_review() -> None:
    old, new = schema(api_key=(SecretStr | None, None)), schema(api_key=(str | None, None))
    before = manifest(jobs={"v.use": job(input=old)})
    after = manifest(jobs={"v.use": job(input=new)})
    [found] = diff_manifests(before, after)
    assert (found.severity, found.kind, found.message) == (
        "review",
        "input_field_not_secret",
        "input 'api_key' is no longer secret: its values will be shown and stored in clear",
    )


def test_a_nested_part_becoming_secret_is_named_by_its_path() -> None:
    class Plain(BaseModel):
        user: str
        password: str

    class Hidden(BaseModel):
        user: str
        password: SecretStr

    old, new = schema(login=(Plain, ...)), schema(login=(Hidden, ...))
    assert findings(old, new) == [
        (
            "input_field_secret",
            "input 'login.password' becomes secret: shown as ***, sealed at rest when keys are set",
        )
    ]


def test_a_field_becoming_secret_with_another_type_is_also_a_type_change() -> None:
    old, new = schema(api_key=(int, ...)), schema(api_key=(SecretStr, ...))
    assert [kind for kind, _ in findings(old, new)] == [
        "input_field_type_changed",
        "input_field_secret",
    ]
