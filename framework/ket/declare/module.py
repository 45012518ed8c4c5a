"""define_module: a named group of models, functions and jobs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from ket.declare.function import FunctionDecl
from ket.declare.job import JobDecl
from ket.declare.model import ModelDecl
from ket.declare.source import UNKNOWN, SourceLocation, caller
from ket.errors import DeclarationError

D = TypeVar("D", ModelDecl, FunctionDecl, JobDecl)


@dataclass(frozen=True, kw_only=True)
class ModuleDecl:
    """A declared module; its members know their module and name."""

    name: str
    models: Mapping[str, ModelDecl] = field(default_factory=dict)
    functions: Mapping[str, FunctionDecl] = field(default_factory=dict)
    jobs: Mapping[str, JobDecl] = field(default_factory=dict)
    source: SourceLocation = UNKNOWN


def _bind(
    module: str, what: str, members: object, kind: type[D], maker: str, source: SourceLocation
) -> dict[str, D]:
    if members is None:
        return {}
    if not isinstance(members, Mapping):
        raise DeclarationError(
            f"{source.render()}: module {module!r}: {what} must be a dict of name to "
            f"{maker}(...), got {members!r}"
        )
    bound: dict[str, D] = {}
    for name, decl in members.items():
        if not isinstance(decl, kind):
            raise DeclarationError(
                f"{source.render()}: module {module!r}: {what}[{name!r}] must be made with "
                f"{maker}(...), got {decl!r}"
            )
        bound[str(name)] = dataclasses.replace(decl, module=module, name=str(name))
    return bound


def define_module(
    *,
    name: str,
    models: Mapping[str, ModelDecl] | None = None,
    functions: Mapping[str, FunctionDecl] | None = None,
    jobs: Mapping[str, JobDecl] | None = None,
) -> ModuleDecl:
    """Declare a module.

    Example::

        sales = define_module(
            name="sales",
            models={"Order": define_model({"number": "string"})},
            functions={"confirm_order": define_function(handler=confirm_order)},
            jobs={"send_confirmation": define_job(idempotent=True, handler=send_confirmation)},
        )
    """
    source = caller()
    if not isinstance(name, str):
        raise DeclarationError(f"{source.render()}: module name must be a string, got {name!r}")
    return ModuleDecl(
        name=name,
        models=_bind(name, "models", models, ModelDecl, "define_model", source),
        functions=_bind(name, "functions", functions, FunctionDecl, "define_function", source),
        jobs=_bind(name, "jobs", jobs, JobDecl, "define_job", source),
        source=source,
    )
