"""Small declarations for check tests, and the findings they are compared with."""

from __future__ import annotations

from collections.abc import Mapping

from ket import define_deployment, define_module
from ket.check import CODES, CheckMessage, Level
from ket.declare import DeploymentDecl, FunctionDecl, JobDecl, ModelDecl, SourceLocation

WORKER = {"queues": {"default": 1}}


def handle(ctx: object, input: object) -> None:
    """A handler that takes (ctx, input), as every handler must."""


def deployment_of(
    *,
    jobs: Mapping[str, JobDecl] | None = None,
    functions: Mapping[str, FunctionDecl] | None = None,
    models: Mapping[str, ModelDecl] | None = None,
    worker: Mapping[str, object] | None = None,
) -> DeploymentDecl:
    """Deployment 'shop' shipping one module 'sales' with the given members."""
    sales = define_module(name="sales", models=models, functions=functions, jobs=jobs)
    return define_deployment(
        name="shop", modules=[sales], worker=WORKER if worker is None else worker
    )


def error(code: str, msg: str, *, obj: str, source: SourceLocation) -> CheckMessage:
    """The ERROR finding `code` with its catalogued hint."""
    return CheckMessage(
        id=code, level=Level.ERROR, msg=msg, hint=CODES[code].hint, obj=obj, source=source
    )


def warning(code: str, msg: str, *, obj: str, source: SourceLocation) -> CheckMessage:
    """The WARNING finding `code` with its catalogued hint."""
    return CheckMessage(
        id=code, level=Level.WARNING, msg=msg, hint=CODES[code].hint, obj=obj, source=source
    )
