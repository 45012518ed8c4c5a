"""Workspaces: the Python module that exposes a project's deployments, and how it is found.

`--workspace` takes a module path (`modules_example.workspace`) or a file path
(`modules_example/workspace.py`); both default from `[tool.ket]` in the nearest pyproject.toml,
as does `--deployment`, which may be left out when the workspace has exactly one deployment.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ket.declare.deployment import DeploymentDecl
from ket.errors import DeclarationError, WorkspaceError

_KET_PACKAGE = str(Path(__file__).resolve().parent)


@dataclass(frozen=True, kw_only=True)
class WorkspaceSettings:
    """`[tool.ket]` of the nearest pyproject.toml (paths in it are relative to `root`)."""

    root: Path
    workspace: str | None = None
    deployment: str | None = None


def find_settings(start: Path) -> WorkspaceSettings:
    """Settings from the nearest pyproject.toml at or above `start` (empty when there is none)."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError) as error:
                raise WorkspaceError(f"cannot read {candidate}: {error}") from None
            section = data.get("tool", {}).get("ket", {})
            if not isinstance(section, dict):
                raise WorkspaceError(f"{candidate}: [tool.ket] must be a table")
            return WorkspaceSettings(
                root=folder,
                workspace=_text(section, "workspace", candidate),
                deployment=_text(section, "deployment", candidate),
            )
    return WorkspaceSettings(root=start)


def _text(section: dict[str, object], key: str, origin: Path) -> str | None:
    value = section.get(key)
    if value is not None and not isinstance(value, str):
        raise WorkspaceError(f"{origin}: [tool.ket] {key} must be a string, got {value!r}")
    return value


def load_deployment(
    workspace: str | None = None, deployment: str | None = None, *, cwd: Path | None = None
) -> DeploymentDecl:
    """The deployment named `deployment` (or the only one) of the workspace."""
    cwd = (cwd or Path.cwd()).resolve()
    settings = find_settings(cwd)
    if workspace is None:
        if settings.workspace is None:
            raise WorkspaceError(
                "no workspace given: pass --workspace (a module or file path) or set "
                "workspace in [tool.ket] of pyproject.toml"
            )
        module = load_workspace(settings.workspace, base=settings.root)
    else:
        module = load_workspace(workspace, base=cwd, fallback=settings.root)
    return pick_deployment(
        module, deployment or (settings.deployment if workspace is None else None)
    )


def pick_deployment(module: ModuleType, name: str | None) -> DeploymentDecl:
    """Choose a deployment of a loaded workspace by name, or the only one."""
    found: dict[str, DeploymentDecl] = {}
    file = getattr(module, "__file__", None)
    where = _relative(file) if file else module.__name__
    for value in vars(module).values():
        if isinstance(value, DeploymentDecl) and found.setdefault(value.name, value) is not value:
            first, second = found[value.name].source, value.source
            raise WorkspaceError(
                f"workspace {where} defines two deployments named {value.name!r} "
                f"({first.render()} and {second.render()}); give each its own name"
            )
    if not found:
        raise WorkspaceError(f"workspace {where} defines no deployment (define_deployment(...))")
    if name is None:
        if len(found) > 1:
            raise WorkspaceError(
                f"workspace {where} has several deployments ({', '.join(sorted(found))}); "
                "choose one with --deployment"
            )
        return next(iter(found.values()))
    if name not in found:
        raise WorkspaceError(
            f"workspace {where} has no deployment {name!r} (it has: {', '.join(sorted(found))})"
        )
    return found[name]


def load_workspace(spec: str, *, base: Path, fallback: Path | None = None) -> ModuleType:
    """Import the workspace given as a module path or a file path (relative to `base`)."""
    if spec.endswith(".py") or "/" in spec or "\\" in spec:
        path = _existing_file(spec, [base, *([fallback] if fallback else [])])
        folder, module_name = _package_root(path)
        return _import(module_name, folder, shown=spec)
    return _import(spec, (fallback or base), extra=base, shown=spec)


def _existing_file(spec: str, bases: list[Path]) -> Path:
    for base in bases:
        try:
            path = (base / spec).resolve()
            found = path.is_file()
        except (OSError, ValueError) as error:  # a name too long, a NUL
            raise WorkspaceError(f"workspace file {spec!r} cannot be read: {error}") from None
        if found and path.suffix != ".py":
            raise WorkspaceError(f"workspace file {spec!r} is not a Python file (.py)")
        if found:
            return path
    raise WorkspaceError(f"workspace file {spec!r} does not exist (looked in {bases[0]})")


def _package_root(path: Path) -> tuple[Path, str]:
    """The folder to import from and the dotted name, climbing through packages."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def _import(module_name: str, folder: Path, *, shown: str, extra: Path | None = None) -> ModuleType:
    for entry in [p for p in (extra, folder) if p is not None]:
        if str(entry) not in sys.path:
            sys.path.insert(0, str(entry))
    try:
        return importlib.import_module(module_name)
    except DeclarationError as error:
        raise WorkspaceError(f"in workspace {shown!r}: {error.message}") from None
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise WorkspaceError(f"workspace module {module_name!r} cannot be found") from None
        raise WorkspaceError(_describe(error, shown)) from None
    except Exception as error:
        raise WorkspaceError(_describe(error, shown)) from None


def _describe(error: BaseException, shown: str) -> str:
    """One line: where in the user's code the import failed, and why."""
    if isinstance(error, SyntaxError) and error.filename:
        where = f"{_relative(error.filename)}:{error.lineno}"
        return f"cannot import workspace {shown!r}: {where}: SyntaxError: {error.msg}"
    where = where_in_user_code(error)
    return f"cannot import workspace {shown!r}: {where}{type(error).__name__}: {error}"


def where_in_user_code(error: BaseException) -> str:
    """`path:line: ` of the innermost frame outside ket, or "" (for one-line error messages)."""
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith(_KET_PACKAGE) and not f.filename.startswith("<frozen")
    ]
    return f"{_relative(frames[-1].filename)}:{frames[-1].lineno}: " if frames else ""


def _relative(filename: str) -> str:
    try:
        return str(Path(filename).resolve().relative_to(Path.cwd()))
    except ValueError:
        return filename
