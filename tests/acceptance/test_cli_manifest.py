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
