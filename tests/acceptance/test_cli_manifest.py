"""`ket manifest`: the committed manifest is current, output is whole, errors write nothing."""

from __future__ import annotations

from pathlib import Path

from .conftest import REPO, Project, run_ket


def test_committed_example_manifest_is_current() -> None:
    result = run_ket("manifest")
    assert result.code == 0, result.err
    assert result.out == (REPO / "manifests" / "erp.yaml").read_text(encoding="utf-8")


def test_output_file_receives_exactly_what_stdout_shows(tmp_path: Path) -> None:
    target = tmp_path / "out.yaml"
    written = run_ket("manifest", "-o", str(target))
    printed = run_ket("manifest")
    assert written.code == 0, written.err
    assert written.out == ""
    assert target.read_text(encoding="utf-8") == printed.out


def test_declarations_with_errors_leave_the_output_file_untouched(
    project: Project, tmp_path: Path
) -> None:
    root = project(
        {
            "app/workspace.py": """
            from ket import define_deployment, define_job, define_module

            def ping(ctx, input):
                return None

            app = define_module(name="app", jobs={"ping": define_job(handler=ping)})
            main = define_deployment(name="main", modules=[app])
            """
        }
    )
    target = root / "manifest.yaml"
    target.write_text("previous\n", encoding="utf-8")
    result = run_ket("manifest", "-o", str(target), cwd=root)
    assert result.code == 1
    assert "KET101" in result.err
    assert target.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".manifest")) == []


def test_output_into_a_missing_folder_is_one_clear_error(tmp_path: Path) -> None:
    result = run_ket("manifest", "-o", str(tmp_path / "absent" / "erp.yaml"))
    assert result.code == 2
    assert "folder" in result.err
    assert "does not exist" in result.err
    assert "Traceback" not in result.err


def test_output_file_gets_an_ordinary_mode_and_keeps_an_existing_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.yaml"
    assert run_ket("manifest", "-o", str(fresh)).code == 0
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~_umask()
    existing = tmp_path / "existing.yaml"
    existing.write_text("old\n", encoding="utf-8")
    existing.chmod(0o640)
    assert run_ket("manifest", "-o", str(existing)).code == 0
    assert existing.stat().st_mode & 0o777 == 0o640


def _umask() -> int:
    import os

    current = os.umask(0)
    os.umask(current)
    return current
