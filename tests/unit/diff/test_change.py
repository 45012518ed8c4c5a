"""Change values: ordering, has_breaking, counts, and the public surface of ket.diff."""

from __future__ import annotations

import ket.diff
from ket.diff import Change, has_breaking
from ket.diff.change import counts, ordered

from .build import change

BREAKING = change("breaking", "job_removed", "job sales.send", "job removed")
REVIEW = change("review", "effects_widened", "job sales.audit", "effects widened")
SAFE = change("safe", "job_added", "job a.first", "job added")


def test_public_names_of_the_diff_room_are_pinned() -> None:
    assert ket.diff.__all__ == [
        "RULES",
        "Change",
        "Severity",
        "diff_manifests",
        "has_breaking",
        "render_json",
        "render_text",
    ]


def test_has_breaking_is_true_only_with_a_breaking_change() -> None:
    assert has_breaking([SAFE, BREAKING]) is True
    assert has_breaking([SAFE, REVIEW]) is False
    assert has_breaking([]) is False


def test_ordered_puts_severity_first_then_subject_then_kind() -> None:
    widened = change("review", "effects_widened", "job sales.send", "effects widened")
    lowered = change("review", "max_attempts_lowered", "job sales.send", "max_attempts lowered")
    assert ordered([SAFE, lowered, REVIEW, widened, BREAKING]) == [
        BREAKING,
        REVIEW,
        widened,
        lowered,
        SAFE,
    ]


def test_ordered_breaks_remaining_ties_by_message() -> None:
    first = change(
        "breaking", "input_field_required", "job s.j", "input field 'a' becomes required"
    )
    second = change(
        "breaking", "input_field_required", "job s.j", "input field 'b' becomes required"
    )
    assert ordered([second, first]) == [first, second]


def test_counts_name_every_severity_even_when_absent() -> None:
    assert counts([SAFE, SAFE, REVIEW]) == {"breaking": 0, "review": 1, "safe": 2}


def test_change_is_a_frozen_keyword_only_value() -> None:
    made = Change(severity="safe", kind="job_added", subject="job a.b", message="job added")
    assert made == change("safe", "job_added", "job a.b", "job added")
    assert made.to_json() == {
        "severity": "safe",
        "kind": "job_added",
        "subject": "job a.b",
        "message": "job added",
        "old": None,
        "new": None,
    }
