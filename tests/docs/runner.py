"""Run one page's blocks, in order, in the scratch project that is the current directory.

    python3 runner.py BLOCKS.json REPORT.json

BLOCKS.json is a list of blocks (tests/docs/blocks.py); REPORT.json receives, for each block
run, its place, what was done and its output, and stops at the first failure (the blocks after
it build on it). Python blocks share one namespace, the module `docs_session`, like a doctest
session; a block that defines `test_*` functions has them run by pytest, ket's fixtures
available. Shell blocks run with `bash -e -o pipefail`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import traceback
import types
from pathlib import Path
from typing import Any

SHELL_TIMEOUT = 90.0
SESSION = "docs_session"


def main(blocks_path: str, report_path: str) -> int:
    blocks = json.loads(Path(blocks_path).read_text(encoding="utf-8"))
    sys.path.insert(0, os.getcwd())  # the scratch project's modules first, as in `python3 -c`
    session = types.ModuleType(SESSION)
    session.__dict__["__file__"] = str(Path.cwd() / f"{SESSION}.py")
    sys.modules[SESSION] = session
    report: list[dict[str, Any]] = []
    failed = False
    for block in blocks:
        if block["kind"] == "file":
            target = Path(block["file"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block["text"], encoding="utf-8")
            _forget_modules()
            ok, output = True, f"wrote {block['file']}"
        elif block["kind"] == "python":
            ok, output = _python(block, session)
        elif block["kind"] == "shell":
            ok, output = _shell(block)
        else:
            continue
        report.append({"where": f"{block['page']}:{block['line']}", "ok": ok, "output": output})
        if not ok:
            failed = True
            break
    Path(report_path).write_text(json.dumps(report), encoding="utf-8")
    return 1 if failed else 0


def _python(block: dict[str, Any], session: types.ModuleType) -> tuple[bool, str]:
    """Exec the block in the session (top-level await allowed), then run the tests it defines."""
    output = io.StringIO()
    try:
        tree = ast.parse(block["text"], filename=block["page"])
        ast.increment_lineno(tree, block["line"])  # tracebacks name the page's own lines
        code = compile(
            tree, block["page"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            result = eval(code, session.__dict__)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
    except BaseException:  # the block's own failure, whatever it is, is the report
        return False, output.getvalue() + traceback.format_exc()
    tests = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    ]
    if not tests:
        return True, output.getvalue()
    return _pytest(block, tests, output)


def _pytest(block: dict[str, Any], tests: list[str], output: io.StringIO) -> tuple[bool, str]:
    import pytest

    module = Path(f"test_docs_line_{block['line']}.py")
    module.write_text(f"from {SESSION} import {', '.join(tests)}\n", encoding="utf-8")
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = pytest.main(
            [str(module), "-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), "-W", "error"]
        )
    module.unlink()
    return code == pytest.ExitCode.OK, output.getvalue()


def _shell(block: dict[str, Any]) -> tuple[bool, str]:
    script = Path(f".docs-block-{block['line']}.sh")
    script.write_text(block["script"], encoding="utf-8")
    process = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the SIGINT or the kill reaches all of it
    )
    note = ""
    try:
        out, _ = process.communicate(timeout=block["interrupt"] or SHELL_TIMEOUT)
    except subprocess.TimeoutExpired:
        if block["interrupt"]:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as a user stops `ket dev`
            try:
                out, _ = process.communicate(timeout=SHELL_TIMEOUT)
            except subprocess.TimeoutExpired:
                out, note = _kill(process), "\n(did not stop within its timeout after SIGINT)"
        else:
            out, note = _kill(process), f"\n(killed after {SHELL_TIMEOUT:.0f} s)"
    script.unlink()
    expected = block["exit"]
    if process.returncode != expected and not note:
        note = f"\n(exit status {process.returncode}, expected {expected})"
    return not note, out + note


def _kill(process: subprocess.Popen[str]) -> str:
    os.killpg(process.pid, signal.SIGKILL)
    out, _ = process.communicate()
    return out


def _forget_modules() -> None:
    """A file just written replaces a module the session may have imported: import it anew."""
    here = os.getcwd()
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(here) and name != SESSION:
            del sys.modules[name]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
