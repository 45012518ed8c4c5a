"""Finding and loading the workspace: defaults, both path forms, and one clear error per mistake."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import REPO, Project, run_ket

GOOD = """
from ket import define_deployment, define_job, define_module

def ping(ctx, input):
    return None

app = define_module(name="app", jobs={"ping": define_job(idempotent=True, handler=ping)})
main = define_deployment(name="main", modules=[app])
"""


def test_defaults_come_from_tool_ket_in_the_nearest_pyproject(project: Project) -> None:
    root = project({"app/workspace.py": GOOD})
    nested = root / "app"
    result = run_ket("check", cwd=nested)
    assert result.code == 0, result.err
    assert "deployment 'main'" in result.out


def test_workspace_as_module_path_and_as_file_path_load_the_same_deployment() -> None:
    by_module = run_ket("manifest", "--workspace", "modules_example.workspace")
    by_file = run_ket("manifest", "--workspace", "modules_example/workspace.py")
    assert by_module.code == by_file.code == 0
    assert by_module.out == by_file.out
    assert "deployment: erp" in by_module.out


def test_missing_workspace_file_is_one_line_without_traceback(project: Project) -> None:
    root = project({})
    result = run_ket("check", cwd=root)
    assert result.code == 2
    assert "workspace file 'app/workspace.py' does not exist" in result.err
    assert "Traceback" not in result.err


def test_unknown_workspace_module_is_reported(tmp_path: Path) -> None:
    result = run_ket("check", "--workspace", "no_such_package.workspace", cwd=tmp_path)
    assert result.code == 2
    assert "workspace module 'no_such_package.workspace' cannot be found" in result.err


def test_error_raised_while_importing_user_code_names_its_file_and_line(project: Project) -> None:
    root = project(
        {
            "app/jobs.py": "def ping(ctx, input):\n    return None\n\nBROKEN = undefined_name\n",
            "app/workspace.py": "from app.jobs import ping\n",
        }
    )
    result = run_ket("check", cwd=root)
    assert result.code == 2
    assert "app/jobs.py:4: NameError: name 'undefined_name' is not defined" in result.err
    assert "Traceback" not in result.err


def test_syntax_error_in_user_code_names_its_file_and_line(project: Project) -> None:
    root = project({"app/workspace.py": "def broken(:\n    pass\n"})
    result = run_ket("manifest", cwd=root)
    assert result.code == 2
    assert "app/workspace.py:1: SyntaxError" in result.err
    assert "Traceback" not in result.err


def test_structural_declaration_error_names_the_value_and_line(project: Project) -> None:
    root = project(
        {
            "app/workspace.py": (
                "from ket import define_module\n"
                "\n"
                "app = define_module(name='app', jobs={'ping': print})\n"
            )
        }
    )
    result = run_ket("check", cwd=root)
    assert result.code == 2
    assert "app/workspace.py:3" in result.err
    assert "jobs['ping'] must be made with define_job(...)" in result.err


def test_workspace_without_deployment_is_an_error(project: Project) -> None:
    root = project({"app/workspace.py": "X = 1\n"})
    result = run_ket("check", cwd=root)
    assert result.code == 2
    assert "defines no deployment" in result.err


def test_several_deployments_need_a_choice_and_unknown_names_are_refused(
    project: Project,
) -> None:
    root = project(
        {"app/workspace.py": GOOD + "second = define_deployment(name='second', modules=[app])\n"}
    )
    ambiguous = run_ket("check", cwd=root)
    assert ambiguous.code == 2
    assert "several deployments (main, second); choose one with --deployment" in ambiguous.err
    chosen = run_ket("check", "--deployment", "second", cwd=root)
    assert chosen.code == 0, chosen.err
    assert "deployment 'second'" in chosen.out
    unknown = run_ket("check", "--deployment", "third", cwd=root)
    assert unknown.code == 2
    assert "has no deployment 'third' (it has: main, second)" in unknown.err


def test_the_example_app_is_the_repository_default() -> None:
    result = run_ket("check", cwd=REPO / "docs")
    assert result.code == 0, result.err
    assert "deployment 'erp' (3 modules, 5 jobs): no issues" in result.out


def test_two_deployments_with_one_name_are_refused(project: Project) -> None:
    root = project(
        {"app/workspace.py": GOOD + "again = define_deployment(name='main', modules=[app])\n"}
    )
    result = run_ket("check", cwd=root)
    assert result.code == 2
    assert "defines two deployments named 'main'" in result.err
    assert "app/workspace.py:8 and app/workspace.py:9" in result.err


ANCHORED_WORKSPACE = """
from ket import define_deployment, define_job, define_module

def audit(ctx, input):
    pass

main = define_deployment(
    name="main",
    modules=[define_module(name="ops", jobs={
        "audit": define_job(idempotent=True, schedule={"every": "1h"}, handler=audit),
    })],
)
"""


def test_commands_in_a_subfolder_use_the_project_root_s_ket_folder(project: Project) -> None:
    root = project({"app/workspace.py": ANCHORED_WORKSPACE, "app/handlers/__init__.py": ""})
    assert run_ket("migrate", cwd=root).code == 0
    called = run_ket("schedules", "run-now", "ops.audit", cwd=root / "app" / "handlers")
    assert called.code == 0, called.err
    listed = run_ket("jobs", "list", "--format", "json", cwd=root / "app" / "handlers")
    assert listed.code == 0, listed.err
    assert [job["name"] for job in json.loads(listed.out)] == ["ops.audit"]
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob(".ket")) == [".ket"]


def test_version_is_printed() -> None:
    shown = run_ket("--version")
    assert (shown.code, shown.err) == (0, "")
    assert re.fullmatch(r"ket \d+\.\d+\.\d+\S*\n", shown.out), shown.out
