"""The rule table: every kind has one severity; classify applies it, capped at a ceiling."""

from __future__ import annotations

import re

from ket.diff import RULES
from ket.diff.rule import Finding, classify

from .build import change


def test_every_kind_is_a_snake_case_code() -> None:
    assert [kind for kind in RULES if not re.fullmatch(r"[a-z]+(_[a-z]+)*", kind)] == []


def test_the_spec_breaking_rules_are_breaking() -> None:
    breaking = {kind for kind, severity in RULES.items() if severity == "breaking"}
    assert breaking == {
        "job_removed",
        "queue_removed",
        "input_schema_replaced",
        "input_field_added_required",
        "input_field_required",
        "input_field_type_changed",
        "input_field_removed",
        "input_version_raised_without_upgrade",
        "input_version_lowered",
    }


def test_classify_takes_the_severity_from_the_table() -> None:
    finding = Finding(kind="job_removed", message="job removed", old=1)
    assert classify("job a.b", finding) == change(
        "breaking", "job_removed", "job a.b", "job removed", old=1
    )


def test_classify_caps_severity_at_the_ceiling_but_never_raises_it() -> None:
    breaking = Finding(kind="input_field_required", message="m")
    safe = Finding(kind="job_added", message="m")
    assert classify("function a.b", breaking, ceiling="review").severity == "review"
    assert classify("function a.b", safe, ceiling="review").severity == "safe"
