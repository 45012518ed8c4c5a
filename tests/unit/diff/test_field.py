"""Which fields of two entries differ, and the generic finding for a field no rule knows."""

from __future__ import annotations

from ket.diff.field import differing_fields, field_changed
from ket.diff.rule import Finding


def test_differing_fields_names_changed_added_and_removed_keys_sorted() -> None:
    old = {"a": 1, "b": {"c": [1, 2]}, "gone": True, "same": "x"}
    new = {"a": 2, "b": {"c": [2, 1]}, "came": None, "same": "x"}
    assert differing_fields(old, new) == ["a", "b", "came", "gone"]


def test_differing_fields_names_keys_even_when_nothing_is_shared() -> None:
    assert differing_fields({"a": 1}, {"b": 2}) == ["a", "b"]


def test_differing_fields_can_skip_fields_compared_elsewhere() -> None:
    assert differing_fields({"a": 1, "b": 1}, {"a": 2, "b": 2}, skip={"b"}) == ["a"]


def test_field_changed_names_scalar_values_as_json() -> None:
    assert field_changed("retries", 1, None) == Finding(
        kind="field_changed", message="retries changed from 1 to null", old=1, new=None
    )


def test_field_changed_names_only_the_field_for_structured_values() -> None:
    assert field_changed("tags", ["a"], ["b"]).message == "tags changed"
