"""`ket diff`: against the current declarations or between files; exit codes; bad files."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conftest import REPO, run_ket

COMMITTED = REPO / "manifests" / "erp.yaml"


def _edited(tmp_path: Path, edit: str) -> Path:
    data = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))
    if edit == "remove_job":
        del data["modules"]["sales"]["jobs"]["send_confirmation"]
    elif edit == "raise_attempts":
        data["modules"]["sales"]["jobs"]["send_confirmation"]["max_attempts"] = 9
    path = tmp_path / f"{edit}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_committed_manifest_has_no_changes_against_the_declarations() -> None:
    result = run_ket("diff", str(COMMITTED), "--exit-code")
    assert result.code == 0, result.err
    assert "no changes" in result.out


def test_removed_job_is_breaking_and_fails_with_exit_code(tmp_path: Path) -> None:
    newer = _edited(tmp_path, "remove_job")
    result = run_ket("diff", str(COMMITTED), str(newer), "--exit-code")
    assert result.code == 1
    assert "breaking" in result.out
    assert "sales.send_confirmation" in result.out
    without_flag = run_ket("diff", str(COMMITTED), str(newer))
    assert without_flag.code == 0


def test_json_format_carries_severity_and_summary(tmp_path: Path) -> None:
    newer = _edited(tmp_path, "raise_attempts")
    result = run_ket("diff", str(COMMITTED), str(newer), "--format", "json", "--exit-code")
    assert result.code == 0, result.err
    document = json.loads(result.out)
    assert document["summary"] == {"breaking": 0, "review": 0, "safe": 1}
    [change] = document["changes"]
    assert change["severity"] == "safe"
    assert change["old"] == 8
    assert change["new"] == 9


def test_file_that_is_not_yaml_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("modules: [unclosed\n", encoding="utf-8")
    result = run_ket("diff", str(bad))
    assert result.code == 2
    assert f"{bad}:" in result.err
    assert "not valid YAML" in result.err
    assert "Traceback" not in result.err


def test_unknown_format_version_is_refused(tmp_path: Path) -> None:
    future = tmp_path / "future.yaml"
    future.write_text("format: 7\ndeployment: erp\n", encoding="utf-8")
    result = run_ket("diff", str(future))
    assert result.code == 2
    assert "unknown manifest format 7; this ket reads format 1" in result.err


def test_missing_manifest_file_is_refused(tmp_path: Path) -> None:
    result = run_ket("diff", str(tmp_path / "absent.yaml"))
    assert result.code == 2
    assert "absent.yaml' does not exist" in result.err
