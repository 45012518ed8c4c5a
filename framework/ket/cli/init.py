"""`ket init [DIR]`: write a minimal project that passes `ket check` and runs under `ket dev`.

It writes `workspace.py` (one deployment), `modules/<module>/` (one model, one function and one
job, scheduled daily in a named timezone and enqueued by the function) and `[tool.ket]` in
`pyproject.toml`: a new pyproject.toml, or the table appended to an existing one, whose text is
kept as it was. It writes nothing when any file it would write exists already (or the existing
pyproject.toml has a `[tool.ket]` table): the error names the file, and the exit status is 2.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import sys
import tomllib
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ket import distribution
from ket.errors import KetError

NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
DEFAULT_MODULE = "hello"
DEFAULT_DEPLOYMENT = "app"
DEFAULT_TIMEZONE = "UTC"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "init",
        parents=parents,
        help="write a minimal project: workspace, first module, [tool.ket]",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "directory", nargs="?", default=".", metavar="DIR", help="where (default: here)"
    )
    parser.add_argument(
        "--module",
        default=DEFAULT_MODULE,
        metavar="NAME",
        help=f"the first module's name (default: {DEFAULT_MODULE})",
    )
    parser.add_argument(
        "--deployment",
        default=DEFAULT_DEPLOYMENT,
        metavar="NAME",
        help=f"the deployment's name (default: {DEFAULT_DEPLOYMENT})",
    )
    parser.add_argument(
        "--timezone",
        default=DEFAULT_TIMEZONE,
        metavar="ZONE",
        help=f"the IANA zone of the job's daily schedule (default: {DEFAULT_TIMEZONE})",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    module = _name("--module", args.module)
    deployment = _name("--deployment", args.deployment)
    timezone = _zone(args.timezone)
    root = Path(args.directory)
    if root.exists() and not root.is_dir():
        raise KetError(f"{args.directory!r} is not a directory")
    files = project_files(module, deployment, timezone)
    for relative in files:
        if (root / relative).exists():
            raise KetError(
                f"{root / relative} exists already; ket init writes only new files "
                "(nothing was written)"
            )
    pyproject = root / "pyproject.toml"
    files["pyproject.toml"] = pyproject_text(pyproject, root, deployment)
    written: list[Path] = []
    try:
        for relative, text in files.items():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(target, text, replace=relative == "pyproject.toml" and pyproject.exists())
            written.append(target)
    except OSError as error:
        for target in written:  # nothing half-written: the files made so far go again
            target.unlink(missing_ok=True)
        raise KetError(f"could not write {error.filename}: {error.strerror}") from error
    for target in written:
        sys.stdout.write(f"wrote {target}\n")
    go = "" if root.resolve() == Path.cwd().resolve() else f"cd {root} && "
    sys.stdout.write(
        f'next: {go}ket check && ket dev --call {module}.greet \'{{"name": "Ada"}}\'\n'
    )
    return 0


def _name(option: str, value: str) -> str:
    if not NAME.fullmatch(value) or keyword.iskeyword(value):
        raise KetError(
            f"{option} must be a lowercase name (a letter, then letters, digits or '_'; not a "
            f"Python keyword), got {value!r}"
        )
    return value


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise KetError(
            f"--timezone must be an IANA zone such as Europe/Paris, got {value!r}"
        ) from error
    if value == "localtime":
        raise KetError("--timezone must name a zone, not 'localtime'")
    return value


def pyproject_text(path: Path, root: Path, deployment: str) -> str:
    """The new pyproject.toml, or the existing one with `[tool.ket]` appended."""
    table = f'[tool.ket]\nworkspace = "workspace.py"\ndeployment = "{deployment}"\n'
    if not path.exists():
        project = _project_name(root)
        return (
            f'[project]\nname = "{project}"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
            f'dependencies = ["{distribution.NAME}"]\n\n{table}'
        )
    try:
        text = path.read_text(encoding="utf-8")
        existing = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise KetError(
            f"{path} cannot be read as TOML ({error}); fix it, then run ket init"
        ) from error
    tool = existing.get("tool")
    if isinstance(tool, dict) and "ket" in tool:
        raise KetError(
            f"{path} has a [tool.ket] table already; ket init writes only new settings "
            "(nothing was written)"
        )
    joined = text + ("" if text.endswith("\n") or not text else "\n") + "\n" + table
    try:
        tomllib.loads(joined)
    except tomllib.TOMLDecodeError as error:  # e.g. `tool` is not a table
        raise KetError(f"{path}: [tool.ket] cannot be added to it ({error})") from error
    return joined


def _project_name(root: Path) -> str:
    words = re.findall(r"[A-Za-z0-9]+", root.resolve().name)
    return "-".join(words).lower() or "app"


def _write(target: Path, text: str, *, replace: bool) -> None:
    """A new file ("x": one that appeared since the check is not overwritten), or, for the
    user's pyproject.toml, a whole new version renamed over it (never a half-written one)."""
    if not replace:
        with target.open("x", encoding="utf-8") as out:
            out.write(text)
        return
    fresh = target.with_name(f".{target.name}.ket-init")
    try:
        fresh.write_text(text, encoding="utf-8")
        fresh.chmod(target.stat().st_mode & 0o777)
        os.replace(fresh, target)
    finally:
        fresh.unlink(missing_ok=True)


def project_files(module: str, deployment: str, timezone: str) -> dict[str, str]:
    """The files of a new project, by path relative to its root (pyproject.toml aside)."""
    return {
        "workspace.py": WORKSPACE.format(module=module, deployment=deployment),
        "modules/__init__.py": '"""The modules of the deployment (see workspace.py)."""\n',
        f"modules/{module}/__init__.py": MODULE.format(module=module, timezone=timezone),
        f"modules/{module}/handlers.py": HANDLERS.format(module=module),
    }


WORKSPACE = '''\
"""The workspace: the deployments the `ket` commands load ([tool.ket] in pyproject.toml)."""

from ket import define_deployment
from modules.{module} import {module}

{deployment} = define_deployment(
    name="{deployment}",
    modules=[{module}],
    worker={{"queues": {{"default": 2}}}},
)
'''

MODULE = '''\
"""The {module} module: greetings, recorded by a function and sent by a job."""

from ket import define_function, define_job, define_model, define_module
from modules.{module}.handlers import greet, send_greetings

{module} = define_module(
    name="{module}",
    models={{
        "Greeting": define_model({{"name": "string", "sent_at": "datetime?"}}),
    }},
    functions={{
        "greet": define_function(
            input={{"name": "string"}},
            effects=["write:{module}.Greeting", "enqueue:{module}.send_greetings"],
            handler=greet,
        ),
    }},
    jobs={{
        "send_greetings": define_job(
            effects=["read:{module}.Greeting", "write:{module}.Greeting"],
            idempotent=True,  # it sends only the greetings not sent yet
            max_attempts=5,
            schedule={{"daily_at": "09:00", "timezone": "{timezone}"}},
            handler=send_greetings,
        ),
    }},
)
'''

HANDLERS = '''\
"""Handlers of the {module} module."""

from __future__ import annotations

from typing import Any


async def greet(ctx: Any, input: Any) -> dict[str, str]:
    """Record a greeting and have it sent now (the schedule sends any left over daily)."""
    greeting_id: str = await ctx.db.insert("{module}.Greeting", {{"name": input.name}})
    job = await ctx.jobs.enqueue("{module}.send_greetings")
    return {{"greeting_id": greeting_id, "job_id": str(job.id)}}


async def send_greetings(ctx: Any, input: Any) -> None:
    """Send every greeting not sent yet, and mark it sent."""
    for greeting in await ctx.db.select("{module}.Greeting", where={{"sent_at": None}}):
        ctx.log.info("hello, " + greeting["name"] + "!")
        await ctx.db.update("{module}.Greeting", {{"id": greeting["id"]}}, {{"sent_at": ctx.now()}})
'''
