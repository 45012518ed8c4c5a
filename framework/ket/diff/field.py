"""Which fields of two manifest entries differ, and the rule that speaks for each."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from typing import Any

from deepdiff import DeepDiff
from pydantic import BaseModel

from ket.diff.rule import Finding

FieldRule = Callable[[Any, Any], list[Finding]]


def dump(entry: BaseModel) -> dict[str, Any]:
    """An entry as JSON data, including fields a subclass adds."""
    return entry.model_dump(mode="json", serialize_as_any=True)


def differing_fields(
    old: Mapping[str, Any], new: Mapping[str, Any], *, skip: Collection[str] = ()
) -> list[str]:
    """Names of the top-level keys whose values differ, sorted."""
    # threshold_to_diff_deeper=0: without it DeepDiff reports two mostly different dicts as one
    # changed root value, which names no key at all.
    diff = DeepDiff(dict(old), dict(new), threshold_to_diff_deeper=0)
    return sorted(str(key) for key in diff.affected_root_keys if key not in skip)


def field_findings(
    old: BaseModel,
    new: BaseModel,
    rules: Mapping[str, FieldRule],
    *,
    skip: Collection[str] = (),
) -> list[tuple[str, Finding]]:
    """(field, finding) for every differing field: its rule's findings, else a generic one."""
    old_data, new_data = dump(old), dump(new)
    found: list[tuple[str, Finding]] = []
    for name in differing_fields(old_data, new_data, skip=skip):
        before, after = old_data.get(name), new_data.get(name)
        rule = rules.get(name)
        findings = rule(before, after) if rule else []
        # A rule may see nothing worth a word (a title-only schema edit); the field still
        # differs, so it is still reported.
        found += [(name, f) for f in findings or [field_changed(name, before, after)]]
    return found


def field_changed(name: str, old: object, new: object) -> Finding:
    """The catch-all finding: `name` differs and no rule classified it."""
    if _is_scalar(old) and _is_scalar(new):
        message = f"{name} changed from {show(old)} to {show(new)}"
    else:
        message = f"{name} changed"
    return Finding(kind="field_changed", message=message, old=old, new=new)


def show(value: object) -> str:
    """A scalar as JSON text: `5`, `true`, `null`; strings bare."""
    return value if isinstance(value, str) else json.dumps(value)


def _is_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
