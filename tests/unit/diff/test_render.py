"""render_text and render_json, on exact output."""

from __future__ import annotations

from ket.diff import diff_manifests, render_json, render_text

from .build import change, job, manifest

CHANGES = [
    change(
        "breaking",
        "job_removed",
        "job sales.send_confirmation",
        "job removed; rows already queued under this name could no longer run",
    ),
    change(
        "review",
        "timeout_ms_lowered",
        "job sales.audit",
        "timeout_ms lowered from 60000 to 30000",
        old=60000,
        new=30000,
    ),
    change("safe", "queue_added", "queue reports", "queue added with concurrency 1", new=1),
]


def test_render_text_aligns_severities_and_ends_with_a_summary() -> None:
    assert render_text(CHANGES) == (
        "breaking  job sales.send_confirmation: "
        "job removed; rows already queued under this name could no longer run\n"
        "review    job sales.audit: timeout_ms lowered from 60000 to 30000\n"
        "safe      queue reports: queue added with concurrency 1\n"
        "1 breaking, 1 review, 1 safe"
    )


def test_render_text_of_no_changes_says_so() -> None:
    assert render_text([]) == "no changes"


def test_render_json_has_sorted_keys_and_a_summary() -> None:
    assert render_json(CHANGES[1:]) == (
        "{\n"
        '  "changes": [\n'
        "    {\n"
        '      "kind": "timeout_ms_lowered",\n'
        '      "message": "timeout_ms lowered from 60000 to 30000",\n'
        '      "new": 30000,\n'
        '      "old": 60000,\n'
        '      "severity": "review",\n'
        '      "subject": "job sales.audit"\n'
        "    },\n"
        "    {\n"
        '      "kind": "queue_added",\n'
        '      "message": "queue added with concurrency 1",\n'
        '      "new": 1,\n'
        '      "old": null,\n'
        '      "severity": "safe",\n'
        '      "subject": "queue reports"\n'
        "    }\n"
        "  ],\n"
        '  "summary": {\n'
        '    "breaking": 0,\n'
        '    "review": 1,\n'
        '    "safe": 1\n'
        "  }\n"
        "}"
    )


def test_render_json_of_no_changes_has_an_empty_list_and_zero_counts() -> None:
    assert render_json([]) == (
        '{\n  "changes": [],\n  "summary": {\n    "breaking": 0,\n    "review": 0,\n'
        '    "safe": 0\n  }\n}'
    )


def test_rendered_json_of_a_real_diff_carries_old_and_new_values_of_the_entries() -> None:
    old = manifest(jobs={"sales.send": job()})
    new = manifest(jobs={"sales.send": job(), "sales.audit": job(input={"type": "object"})})
    assert '"input": {\n          "type": "object"\n        }' in render_json(
        diff_manifests(old, new)
    )
