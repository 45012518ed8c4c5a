"""A job's input compared together with its input version and upgrades."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ket.diff import diff_manifests
from ket.manifest import read_manifest

from .build import job, manifest, schema

OLD_INPUT = schema(order_id=(str, ...))
NEW_INPUT = schema(order_id=(str, ...), currency=(str, ...))  # a new required field


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    changes = diff_manifests(
        manifest(jobs={"sales.send": job(**old)}), manifest(jobs={"sales.send": job(**new)})
    )
    assert {c.subject for c in changes} <= {"job sales.send"}
    return [(c.severity, c.kind, c.message) for c in changes]


def test_a_breaking_input_change_without_a_version_stays_breaking() -> None:
    found = _diff({"input": OLD_INPUT}, {"input": NEW_INPUT})
    assert [(s, k) for s, k, _ in found] == [("breaking", "input_field_added_required")]


def test_a_breaking_input_change_with_a_raised_version_and_its_upgrade_is_safe() -> None:
    found = _diff(
        {"input": OLD_INPUT},
        {"input": NEW_INPUT, "input_version": 2, "upgrades_from": [1]},
    )
    assert found == [
        ("safe", "input_field_added_required", found[0][2]),
        (
            "safe",
            "input_version_raised",
            "input version raised from 1 to 2; rows already queued at version 1 are upgraded "
            "as they run",
        ),
    ]


def test_a_raised_version_without_an_upgrade_from_the_old_one_is_breaking() -> None:
    found = _diff(
        {"input": OLD_INPUT, "input_version": 2, "upgrades_from": [1]},
        {"input": NEW_INPUT, "input_version": 3, "upgrades_from": [1]},
    )
    assert [(s, k) for s, k, _ in found] == [
        ("breaking", "input_field_added_required"),
        ("breaking", "input_version_raised_without_upgrade"),
    ]
    assert (
        "no upgrade from version 2; rows already queued at version 2 would be discarded"
        in (found[1][2])
    )


def test_a_lowered_version_is_breaking() -> None:
    found = _diff({"input_version": 3, "upgrades_from": [1, 2]}, {"input_version": 2})
    assert [(s, k) for s, k, _ in found] == [
        ("breaking", "input_version_lowered"),
        ("review", "input_upgrade_removed"),
    ]


def test_dropping_an_old_upgrade_is_for_review_and_adding_one_is_safe() -> None:
    old = {"input_version": 3, "upgrades_from": [1, 2]}
    assert _diff(old, {"input_version": 3, "upgrades_from": [2]}) == [
        (
            "review",
            "input_upgrade_removed",
            "upgrade from input version 1 removed; rows still queued at that version would be "
            "discarded",
        )
    ]
    assert _diff({"input_version": 3, "upgrades_from": [2]}, old) == [
        ("safe", "input_upgrade_added", "upgrade from input version 1 added")
    ]


def test_a_manifest_written_before_versions_reads_as_version_1(tmp_path: Path) -> None:
    current = manifest(jobs={"sales.send": job(input_version=2, upgrades_from=[1])})
    data = current.model_dump(mode="json")
    entry = data["modules"]["sales"]["jobs"]["send"]
    assert (entry["input_version"], entry["upgrades_from"]) == (2, [1])
    del entry["input_version"], entry["upgrades_from"]  # as an older ket wrote it
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    [send] = read_manifest(path).jobs().values()
    assert (send.input_version, send.upgrades_from) == (1, [])
