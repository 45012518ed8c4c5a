"""The docs run: every Python and shell block of README.md and docs/ runs in a scratch project.

One test per page (its id is the page); the blocks of a page run in order in one scratch
project, and a failure names the block (`docs/jobs.md:123`) and shows its output. The
convention is in docs/testing.md (`The docs run`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

import ket
from tests.docs.blocks import Block, DirectiveError, Page, parse_file, parse_page

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER = Path(__file__).with_name("runner.py")
PAGE_TIMEOUT = 600
SCRATCH_PYPROJECT = """\
[project]
name = "scratch"
version = "0.1.0"

[tool.ket]
workspace = "modules_example/workspace.py"
deployment = "erp"
"""


def scratch_project(folder: Path, kind: str) -> None:
    """The project a page's blocks run in: the example app with its manifest, or nothing."""
    if kind == "empty":
        return
    shutil.copytree(
        ROOT / "modules_example",
        folder / "modules_example",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (folder / "manifests").mkdir()
    shutil.copy(ROOT / "manifests" / "erp.yaml", folder / "manifests" / "erp.yaml")
    (folder / "pyproject.toml").write_text(SCRATCH_PYPROJECT, encoding="utf-8")


def commands(folder: Path) -> Path:
    """`ket` and `python3` for shell blocks: this interpreter and this checkout of ket."""
    bin_folder = folder / "bin"
    bin_folder.mkdir()
    # scripts that exec the interpreter, not links to it: a link outside a virtual environment
    # starts Python outside it too (Python finds its environment's pyvenv.cfg next to the path
    # it was started by), and ket's dependencies would be missing
    for name, run in (("ket", "-m ket.cli.main "), ("python3", ""), ("python", "")):
        script = bin_folder / name
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" {run}"$@"\n', encoding="utf-8")
        script.chmod(0o755)
    return bin_folder


def environment(bin_folder: Path, project: Path) -> dict[str, str]:
    framework = Path(ket.__file__).resolve().parents[1]
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "KET_")) or key == "KET_TEST_POSTGRES_URL"
    }
    env.pop("KET_TEST_POSTGRES_URL", None)  # the docs run on the embedded default
    env["PATH"] = f"{bin_folder}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(project), str(framework)])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["COLUMNS"] = "80"  # help texts wrap as the pages show them
    env["PIP_REQUIRE_VIRTUALENV"] = "1"  # a block that installs fails, it never changes this one
    return env


@pytest.mark.parametrize("path", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_block_of_the_page_runs(path: Path, tmp_path: Path) -> None:
    report = run_page(parse_file(path, ROOT), tmp_path)
    failed = [entry for entry in report if not entry["ok"]]
    if failed:
        shown = "\n\n".join(f"{e['where']}: the block failed:\n{e['output']}" for e in failed)
        pytest.fail(shown, False)


def run_page(page: Page, folder: Path) -> list[dict[str, Any]]:
    """Run the page's blocks in a scratch project under `folder`; the runner's report."""
    runnable = [b for b in page.blocks if b.kind in ("python", "shell", "file", "same-as")]
    if not runnable:
        return []  # nothing to run (its samples are still parsed, so its comments are checked)
    project = folder / "shop"  # the folder start.md names its project after
    project.mkdir()
    scratch_project(project, page.scratch)
    bin_folder = commands(folder)
    blocks_file = folder / "blocks.json"
    blocks_file.write_text(json.dumps([_plain(b) for b in runnable]), encoding="utf-8")
    report_file = folder / "report.json"
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(blocks_file), str(report_file)],
        cwd=project,
        env=environment(bin_folder, project),
        capture_output=True,
        text=True,
        timeout=PAGE_TIMEOUT,
    )
    assert report_file.exists(), f"the runner failed:\n{done.stdout}{done.stderr}"
    report: list[dict[str, Any]] = json.loads(report_file.read_text(encoding="utf-8"))
    assert len(report) == len(runnable), f"the runner stopped early:\n{done.stdout}{done.stderr}"
    return report


def _plain(block: Block) -> dict[str, object]:
    data = asdict(block)
    data["kind"] = block.kind
    data["script"] = block.script()
    data["transcript"] = block.transcript()
    return data


# -- the convention itself ----------------------------------------------------------------


def _page(text: str) -> Page:
    return parse_page(text, "docs/x.md")


def test_a_skip_without_a_reason_is_refused() -> None:
    with pytest.raises(DirectiveError, match=r"docs/x.md:1: a skip needs its reason"):
        _page("<!-- docs-test: skip -->\n```python\nprint(1)\n```\n")


def test_the_django_form_of_a_skip_is_accepted() -> None:
    page = _page(
        "<!-- docs-test: skip (proven by tests/integration/test_django.py) -->\n"
        "```python\nimport django\n```\n"
    )
    [block] = page.blocks
    assert (block.kind, block.skip) == ("skip", "proven by tests/integration/test_django.py")


def test_a_comment_not_directly_above_a_fence_is_refused() -> None:
    with pytest.raises(DirectiveError, match=r"docs/x.md:1: .* directly above a fenced block"):
        _page("<!-- docs-test: skip (why) -->\n\n```python\nprint(1)\n```\n")


def test_an_unknown_comment_is_refused() -> None:
    with pytest.raises(DirectiveError, match=r"docs/x.md:1: unknown docs-test comment 'sikp'"):
        _page("<!-- docs-test: sikp -->\n```python\nprint(1)\n```\n")


def test_a_file_outside_the_project_is_refused() -> None:
    with pytest.raises(DirectiveError, match=r"relative path inside the project"):
        _page("<!-- docs-test: file ../evil.py -->\n```python\nprint(1)\n```\n")


def test_blocks_keep_their_lines_tags_and_options() -> None:
    page = _page(
        "# Title\n"
        "```python\nx = 1\n```\n"
        "<!-- docs-test: file shop/app.py -->\n"
        "```python\ny = 2\n```\n"
        "- a list item:\n\n"
        "  <!-- docs-test: exit 1 -->\n"
        "  ```sh\n  ket check\n  ```\n"
        "```text\nsample\n```\n"
        "```console\n$ ket check \\\n  --format json\n{...}\n$ ket manifest\n```\n"
    )
    assert [(b.line, b.tag, b.kind) for b in page.blocks] == [
        (2, "python", "python"),
        (6, "python", "file"),
        (12, "sh", "shell"),
        (15, "text", "sample"),
        (18, "console", "shell"),
    ]
    assert (page.blocks[1].file, page.blocks[2].text, page.blocks[2].exit) == (
        "shop/app.py",
        "ket check\n",
        1,
    )
    assert page.blocks[4].script() == "ket check \\\n  --format json\nket manifest\n"


def test_every_page_follows_the_convention() -> None:
    for path in PAGES:
        parse_file(path, ROOT)  # raises DirectiveError naming the page and line


def _outcomes(text: str, folder: Path) -> list[tuple[str, bool]]:
    return [(e["where"], e["ok"]) for e in run_page(_page(text), folder)]


def test_the_runner_reports_the_failing_block_by_its_line_and_goes_on(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: scratch empty -->\n"
        "```python\nx = 1\n```\n"
        "```python\nassert x == 2, 'x is ' + str(x)\n```\n"
        "```sh\nfalse\n```\n"
        "<!-- docs-test: exit 3 -->\n```sh\nexit 3\n```\n"
    )
    report = run_page(_page(page), tmp_path)
    assert [(e["where"], e["ok"]) for e in report] == [
        ("docs/x.md:2", True),
        ("docs/x.md:5", False),
        ("docs/x.md:8", False),
        ("docs/x.md:12", True),
    ]
    assert 'File "docs/x.md", line 6' in report[1]["output"] and "x is 1" in report[1]["output"]


def test_a_signature_block_is_compared_with_the_callable(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: scratch empty -->\n"
        "<!-- docs-test: signature -->\n```python\ndefine_model(fields) -> ModelDecl\n```\n"
        "<!-- docs-test: signature -->\n```python\ndefine_model(fields, *, x=1) -> ModelDecl\n```\n"
    )
    assert _outcomes(page, tmp_path) == [("docs/x.md:3", True), ("docs/x.md:7", False)]


def test_a_console_block_compares_what_each_command_prints(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: scratch empty -->\n"
        "```console\n$ printf 'a\\nb\\nc\\n'\na\n...\n$ echo 'id 17 done'\nid ... done\n```\n"
        "```console\n$ echo one\ntwo\n```\n"
    )
    assert _outcomes(page, tmp_path) == [("docs/x.md:2", True), ("docs/x.md:9", False)]


def test_a_test_block_runs_under_pytest_and_its_failure_fails_the_block(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: scratch empty -->\n"
        "```python\ndef test_passes(tmp_path):\n    assert tmp_path.is_dir()\n```\n"
        "```python\ndef test_fails():\n    assert 1 == 2\n```\n"
    )
    assert _outcomes(page, tmp_path) == [("docs/x.md:2", True), ("docs/x.md:6", False)]


def test_a_same_as_block_must_be_the_file(tmp_path: Path) -> None:
    page = (
        "<!-- docs-test: file a.txt -->\n```text\nhello\n```\n"
        "<!-- docs-test: same-as a.txt -->\n```text\nhello\n```\n"
        "<!-- docs-test: same-as a.txt -->\n```text\nhullo\n```\n"
    )
    assert _outcomes("<!-- docs-test: scratch empty -->\n" + page, tmp_path) == [
        ("docs/x.md:3", True),
        ("docs/x.md:7", True),
        ("docs/x.md:11", False),
    ]
