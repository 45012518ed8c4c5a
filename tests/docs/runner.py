"""Run one page's blocks, in order, in the scratch project that is the current directory.

    python3 runner.py BLOCKS.json REPORT.json

BLOCKS.json is a list of blocks (tests/docs/blocks.py); REPORT.json receives, for each block
run, its place, whether it passed and its output. A failed block does not stop the page: the
report shows every failure, the first one first (the later ones may follow from it).

Python blocks share one namespace, the module `docs_session`, like a doctest session; a block
that defines `test_*` functions has them run by pytest, ket's fixtures available. Shell blocks
run with `bash -e -o pipefail`; a console block's commands each with `bash -o pipefail`.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

# seconds a shell block or a console command may take (DOCS_TEST_TIMEOUT to try a page faster)
SHELL_TIMEOUT = float(os.environ.get("DOCS_TEST_TIMEOUT", "90"))
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
        elif block["kind"] == "same-as":
            ok, output = _same_as(block)
        elif block["kind"] == "python":
            ok, output = _python(block, session)
        elif block["kind"] == "shell" and block["tag"] == "console":
            ok, output = _console(block)
        elif block["kind"] == "shell" and block["interrupt"]:
            with _one_server_at_a_time():
                ok, output = _shell(block)
        elif block["kind"] == "shell":
            ok, output = _shell(block)
        else:
            continue
        report.append({"where": f"{block['page']}:{block['line']}", "ok": ok, "output": output})
        failed = failed or not ok
    Path(report_path).write_text(json.dumps(report), encoding="utf-8")
    return 1 if failed else 0


def _python(block: dict[str, Any], session: types.ModuleType) -> tuple[bool, str]:
    """Exec the block in the session (top-level await allowed), then run the tests it defines."""
    if block["mode"] == "signature":
        return _signature(block, session)
    output = io.StringIO()
    # as many blank lines as precede the block: tracebacks name the page's own lines
    source = "\n" * block["line"] + block["text"]
    try:
        tree = ast.parse(source, filename=block["page"])
        code = compile(
            tree, block["page"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
        )
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            result = eval(code, session.__dict__)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
    except BaseException as error:  # the block's own failure, whatever it is, is the report
        return False, output.getvalue() + _traceback(error)
    tests = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    ]
    if not tests:
        return True, output.getvalue()
    return _pytest(block, tests, output)


def _signature(block: dict[str, Any], session: types.ModuleType) -> tuple[bool, str]:
    """Compare `name(parameters) -> Result` with the signature of `name` (the session's, else
    ket's): the parameters' names, kinds and defaults, and the result's name."""
    import inspect

    import ket

    try:
        tree = ast.parse(f"def {block['text'].strip()}: ...", filename=block["page"])
    except SyntaxError as error:
        return False, f"not a signature `name(parameters) -> Result`: {error}"
    [node] = tree.body
    assert isinstance(node, ast.FunctionDef)
    real = session.__dict__.get(node.name) or getattr(ket, node.name, None)
    if real is None:
        return False, f"no callable {node.name!r} in the session or in ket"
    shown = _parameters(node)
    actual = [
        (p.name, p.kind.name, None if p.default is p.empty else repr(p.default))
        for p in inspect.signature(real).parameters.values()
    ]
    result = ast.unparse(node.returns) if node.returns else None
    annotation = inspect.signature(real).return_annotation
    actual_result = (
        annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    )
    if shown != actual or (result is not None and result != actual_result):
        return (
            False,
            f"the block shows {shown} -> {result}\n{node.name} has {actual} -> {actual_result}",
        )
    return True, ""


def _parameters(node: ast.FunctionDef) -> list[tuple[str, str, str | None]]:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += list(args.defaults)
    shown = [
        (a.arg, "POSITIONAL_ONLY" if a in args.posonlyargs else "POSITIONAL_OR_KEYWORD", d)
        for a, d in zip(positional, defaults, strict=True)
    ]
    if args.vararg:
        shown.append((args.vararg.arg, "VAR_POSITIONAL", None))
    shown += [
        (a.arg, "KEYWORD_ONLY", d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        shown.append((args.kwarg.arg, "VAR_KEYWORD", None))
    return [
        (name, kind, None if d is None else repr(ast.literal_eval(d))) for name, kind, d in shown
    ]


def _same_as(block: dict[str, Any]) -> tuple[bool, str]:
    """The block quotes a file of the project whole: its text must be the file's."""
    import difflib

    path = Path(block["same_as"])
    if not path.is_file():
        return False, f"{path} is not a file of the scratch project"
    actual = path.read_text(encoding="utf-8")
    if actual == block["text"]:
        return True, ""
    diff = difflib.unified_diff(
        block["text"].splitlines(keepends=True),
        actual.splitlines(keepends=True),
        "the block",
        str(path),
    )
    return False, "".join(diff)


def _traceback(error: BaseException) -> str:
    """The traceback from the block's own frames on (the runner's are left out)."""
    trace = error.__traceback__
    while trace is not None and trace.tb_frame.f_code.co_filename == __file__:
        trace = trace.tb_next
    return "".join(traceback.format_exception(type(error), error, trace))


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
    if block["interrupt"]:
        out, note = _interrupted(process, block["interrupt"])
    else:
        try:
            out, _ = process.communicate(timeout=SHELL_TIMEOUT)
            note = ""
        except subprocess.TimeoutExpired:
            out, note = _kill(process), f"\n(killed after {SHELL_TIMEOUT:.0f} s)"
    script.unlink()
    expected = block["exit"]
    if process.returncode != expected and not note:
        note = f"\n(exit status {process.returncode}, expected {expected})"
    return not note, out + note


def _interrupted(process: subprocess.Popen[str], ready: str) -> tuple[str, str]:
    """Ctrl-C (SIGINT to the process group, as a user stops `ket dev`) once a line of the
    block's output holds `ready`, the sign that its long-running command is up and did what
    the page says; its output, and a note if it never got there or did not stop."""
    assert process.stdout is not None
    lines: list[str] = []
    seen = threading.Event()

    def read(stream: IO[str]) -> None:
        for line in stream:
            lines.append(line)
            if ready in line:
                seen.set()
        seen.set()  # the output ended: the block exited on its own

    reader = threading.Thread(target=read, args=(process.stdout,), daemon=True)
    reader.start()
    note = ""
    if not seen.wait(SHELL_TIMEOUT):
        note = f"\n(no line held {ready!r} within {SHELL_TIMEOUT:.0f} s)"
    elif not any(ready in line for line in lines):
        note = f"\n(it ended before a line held {ready!r})"
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=SHELL_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            note = note or "\n(did not stop within its timeout after SIGINT)"
    reader.join()
    return "".join(lines), note


def _console(block: dict[str, Any]) -> tuple[bool, str]:
    """Each `$ ` command of the block, its output compared with the lines shown below it."""
    shown_all: list[str] = []
    for command, shown in block["transcript"]:
        process = subprocess.Popen(
            ["bash", "-o", "pipefail", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = process.communicate(timeout=SHELL_TIMEOUT)
        except subprocess.TimeoutExpired:
            return False, f"$ {command}\n{_kill(process)}\n(killed after {SHELL_TIMEOUT:.0f} s)"
        done = subprocess.CompletedProcess(command, process.returncode, out)
        printed = done.stdout.splitlines()
        shown_all.append(f"$ {command}")
        if not matches(shown, printed):
            return False, (
                f"$ {command}\n--- the block shows:\n"
                + "\n".join(shown)
                + f"\n--- it printed (exit status {done.returncode}):\n"
                + done.stdout
            )
        shown_all.extend(printed)
    return True, "\n".join(shown_all)


def matches(shown: list[str], printed: list[str]) -> bool:
    """Whether `printed` is `shown`, where `...` stands for any text and a line `...` for any
    lines (none included)."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?"
        if line.strip() == "..."
        else r"[^\n]*?".join(re.escape(part) for part in line.split("...")) + r"\n"
        for line in shown
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in printed)) is not None


@contextlib.contextmanager
def _one_server_at_a_time() -> Iterator[None]:
    """Long-running commands (`ket serve`, `ket dev --all`) listen on the default port 8000:
    pages run side by side (pytest -n) take turns with them."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "ket-docs-servers.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


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
