"""The fenced blocks of a documentation page, and the `docs-test` comments that steer them.

The convention (docs/testing.md#the-docs-run):

- a block tagged `python`/`py` runs in the page's Python session, `sh`/`bash` runs with
  `bash -e`, and `console` runs each of its `$ ` lines and compares what it prints with the
  lines shown below it (`...` stands for any text, a line of its own for any lines); every
  other tag is a sample and is not run;
- `<!-- docs-test: ... -->` comments on the lines directly above an opening fence steer that
  block: `skip (reason)`, `file PATH`, `same-as PATH`, `exit N`, `interrupt once "TEXT"`, and
  for a Python block `signature` (compared with the real callable's);
- `<!-- docs-test: scratch empty -->` anywhere in a page starts its scratch project empty
  instead of as a copy of the example app.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypedDict

PYTHON_TAGS = frozenset({"python", "py"})
SHELL_TAGS = frozenset({"sh", "bash"})
CONSOLE_TAGS = frozenset({"console"})
RUN_TAGS = PYTHON_TAGS | SHELL_TAGS | CONSOLE_TAGS

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<tag>[\w+-]*)[ \t]*$")
DIRECTIVE = re.compile(r"^[ \t]*<!--\s*docs-test:(?P<body>.*?)-->[ \t]*$")
SKIP = re.compile(r"^skip(?:\s+\((?P<reason>.*)\))?$")
FILE = re.compile(r"^(?P<how>file|same-as)\s+(?P<path>\S+)$")
EXIT = re.compile(r"^exit\s+(?P<code>\d+)$")
INTERRUPT = re.compile(r'^interrupt once\s+"(?P<text>[^"]+)"$')
MODES = frozenset({"signature"})
SCRATCH = re.compile(r"^scratch\s+(?P<kind>empty|example)$")


class DirectiveError(ValueError):
    """A `docs-test` comment the harness cannot follow."""


class Options(TypedDict, total=False):
    """What a block's `docs-test` comments ask: the optional fields of its Block."""

    skip: str
    file: str
    same_as: str
    exit: int
    interrupt: str
    mode: str


@dataclass(frozen=True, kw_only=True)
class Block:
    """One fenced block: where it opens, its tag, its text, and what its comments ask."""

    page: str
    line: int  # of the opening fence, 1-based
    tag: str
    text: str
    skip: str | None = None  # the reason, when skipped
    file: str | None = None  # written as this file of the scratch project, not run
    same_as: str | None = None  # must be the text of this file of the scratch project
    exit: int = 0  # the exit status the shell block must end with
    interrupt: str | None = None  # SIGINT once a line of its output holds this text
    mode: str = "exec"  # a Python block: exec, or signature (compared with the callable's)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """What the harness does with it: skip, file, python, shell or sample."""
        if self.skip is not None:
            return "skip"
        if self.file is not None:
            return "file"
        if self.same_as is not None:
            return "same-as"
        if self.tag in PYTHON_TAGS:
            return "python"
        if self.tag in SHELL_TAGS | CONSOLE_TAGS:
            return "shell"
        return "sample"

    def script(self) -> str:
        """The shell text to run: the block, or a console block's `$ ` commands."""
        if self.tag not in CONSOLE_TAGS:
            return self.text
        return "".join(command + "\n" for command, _ in self.transcript())

    def transcript(self) -> list[tuple[str, list[str]]]:
        """A console block's commands, each with the output lines shown below it."""
        steps: list[tuple[str, list[str]]] = []
        continued = False
        for line in self.text.splitlines():
            if continued:
                command, shown = steps[-1]
                steps[-1] = (command + "\n" + line, shown)
            elif line.startswith("$ "):
                steps.append((line[2:], []))
            elif steps:
                steps[-1][1].append(line)
            continued = line.endswith("\\") and (continued or line.startswith("$ "))
        return steps


@dataclass(frozen=True, kw_only=True)
class Page:
    """A documentation page's blocks, in order, and how its scratch project starts."""

    path: str
    blocks: tuple[Block, ...]
    scratch: str = "example"


def parse_page(text: str, page: str) -> Page:
    """The blocks of markdown `text`; raises DirectiveError naming `page:line` for a comment
    the harness cannot follow (a skip without a reason, an unknown word, a comment that is
    not directly above a fence)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    scratch = "example"
    pending: list[tuple[int, str]] = []
    number = 0
    while number < len(lines):
        line = lines[number]
        directive = DIRECTIVE.match(line)
        fence = FENCE.match(line)
        if directive:
            body = directive.group("body").strip()
            found = SCRATCH.match(body)
            if found:
                scratch = found.group("kind")
            else:
                pending.append((number + 1, body))
            number += 1
            continue
        if pending and not fence:
            where, body = pending[0]
            raise DirectiveError(
                f"{page}:{where}: a docs-test comment must be directly above a fenced block, "
                f"got {body!r} above {line!r}"
            )
        if fence:
            end = _closing(lines, number, fence.group("indent"), page)
            body_lines = [_dedent(raw, fence.group("indent")) for raw in lines[number + 1 : end]]
            options = _options(pending, page)
            blocks.append(
                Block(
                    page=page,
                    line=number + 1,
                    tag=fence.group("tag").lower(),
                    text="\n".join(body_lines) + "\n",
                    **options,
                )
            )
            pending = []
            number = end + 1
            continue
        number += 1
    if pending:
        raise DirectiveError(f"{page}:{pending[0][0]}: a docs-test comment with no block below it")
    return Page(path=page, blocks=tuple(blocks), scratch=scratch)


def parse_file(path: Path, root: Path) -> Page:
    return parse_page(path.read_text(encoding="utf-8"), path.relative_to(root).as_posix())


def _closing(lines: list[str], start: int, indent: str, page: str) -> int:
    for number in range(start + 1, len(lines)):
        if lines[number].strip() == "```":
            return number
    raise DirectiveError(f"{page}:{start + 1}: the block opened here is never closed")


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def _options(pending: list[tuple[int, str]], page: str) -> Options:
    options: Options = {}
    for where, body in pending:
        if found := SKIP.match(body):
            reason = (found.group("reason") or "").strip()
            if not reason:
                raise DirectiveError(
                    f"{page}:{where}: a skip needs its reason: <!-- docs-test: skip (why) -->"
                )
            options["skip"] = reason
        elif found := FILE.match(body):
            path = PurePosixPath(found.group("path"))
            if path.is_absolute() or ".." in path.parts:
                raise DirectiveError(
                    f"{page}:{where}: a file must be a relative path inside the project, "
                    f"got {str(path)!r}"
                )
            if found.group("how") == "file":
                options["file"] = str(path)
            else:
                options["same_as"] = str(path)
        elif found := EXIT.match(body):
            options["exit"] = int(found.group("code"))
        elif found := INTERRUPT.match(body):
            options["interrupt"] = found.group("text")
        elif body in MODES:
            options["mode"] = body
        else:
            raise DirectiveError(
                f"{page}:{where}: unknown docs-test comment {body!r}; expected skip (reason), "
                'file PATH, same-as PATH, exit N, interrupt once "TEXT", signature or '
                "scratch empty|example"
            )
    return options


def main() -> None:
    """Print, for each page, how many blocks run, are written as files, are skipped or are
    samples: `python3 -m tests.docs.blocks`."""
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    print(f"{'page':34} {'run':>4} {'files':>5} {'skipped':>7} {'samples':>7}")
    for path in pages:
        page = parse_file(path, root)
        kinds = [block.kind for block in page.blocks]
        run = sum(kind in ("python", "shell", "same-as") for kind in kinds)
        print(
            f"{page.path:34} {run:>4} {kinds.count('file'):>5} {kinds.count('skip'):>7} "
            f"{kinds.count('sample'):>7}"
        )
        for block in page.blocks:
            if block.skip is not None:
                print(f"    skip {block.where}: {block.skip}")


if __name__ == "__main__":
    main()
