"""Options every command shares, and the output helpers commands use."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ket.declare.deployment import DeploymentDecl
from ket.errors import KetError
from ket.workspace import find_settings, load_deployment


def workspace_parent() -> argparse.ArgumentParser:
    """--workspace and --deployment, for every command."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("workspace")
    group.add_argument(
        "--workspace",
        metavar="PATH",
        help="module path or file path of the workspace (default: [tool.ket] in pyproject.toml)",
    )
    group.add_argument(
        "--deployment",
        metavar="NAME",
        help="deployment to use (default: [tool.ket], or the only one in the workspace)",
    )
    return parent


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_FORMATS = ("text", "json")


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """--log-level and --log-format, for the commands that log (worker, dev)."""
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        help="text (default), or json: one JSON object a line (also KET_LOG_FORMAT)",
    )


def log_format(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    """--log-format, else KET_LOG_FORMAT, else text."""
    chosen: str = args.log_format or environ.get("KET_LOG_FORMAT") or "text"
    if chosen not in LOG_FORMATS:
        raise KetError(f"KET_LOG_FORMAT must be text or json, got {chosen!r}")
    return chosen


def log_third_party(environ: Mapping[str, str]) -> bool:
    """KET_LOG_THIRD_PARTY=1: the libraries' loggers follow --log-level (else WARNING)."""
    return environ_flag(environ, "KET_LOG_THIRD_PARTY")


def environ_flag(environ: Mapping[str, str], name: str) -> bool:
    """An environment variable that is 0 (or unset) or 1; anything else is an error."""
    value = environ.get(name) or "0"
    if value not in ("0", "1"):
        raise KetError(f"{name} must be 0 or 1, got {value!r}")
    return value == "1"


def deployment_of(args: argparse.Namespace) -> DeploymentDecl:
    """Load the deployment the command line points at."""
    return load_deployment(args.workspace, args.deployment)


def workspace_named(args: argparse.Namespace) -> bool:
    """Whether there is a workspace to load, given (`--workspace`, `--deployment`) or configured
    (`[tool.ket]`), for the commands whose workspace is optional."""
    given = args.workspace is not None or args.deployment is not None
    return given or find_settings(Path.cwd()).workspace is not None


def _mode_for(target: Path) -> int:
    """The existing file's mode, or 0666 less the umask for a new file."""
    if target.exists():
        return target.stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_output(text: str, path: str | None) -> None:
    """Print `text`, or write it to `path` whole or not at all (temp file, then rename).

    Only a regular file is written: renaming over a device such as /dev/null, or a FIFO, would
    replace it with a file (`-` is standard output)."""
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    try:
        _write_file(text, Path(path))
    except OSError as error:
        raise KetError(f"cannot write {path!r}: {error.strerror or error}") from None
    except ValueError as error:  # a NUL in the path
        raise KetError(f"cannot write {path!r}: {error}") from None


def _write_file(text: str, target: Path) -> None:
    folder = target.parent
    if not folder.is_dir():
        raise KetError(f"cannot write {str(target)!r}: folder {str(folder)!r} does not exist")
    if target.is_dir():
        raise KetError(f"cannot write {str(target)!r}: it is a folder")
    if target.exists() and not target.is_file():
        raise KetError(
            f"cannot write {str(target)!r}: it is not a regular file (use - for standard output)"
        )
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        # mkstemp makes the file 0600; give it the mode a plain open() would have had
        os.chmod(temporary, _mode_for(target))
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
