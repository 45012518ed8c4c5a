"""define_deployment: the modules a deployment ships, how its worker runs them and how `ket serve`
serves its functions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ket.declare.function import FunctionDecl
from ket.declare.job import JobDecl
from ket.declare.model import ModelDecl
from ket.declare.module import ModuleDecl
from ket.declare.source import UNKNOWN, SourceLocation, caller
from ket.errors import DeclarationError


@dataclass(frozen=True, kw_only=True)
class DeploymentDecl:
    """A declared deployment; `worker` and `serve` are kept as written and validated by
    `ket check`."""

    name: str
    modules: tuple[ModuleDecl, ...] = ()
    worker: Mapping[str, object] = field(default_factory=dict)
    serve: Mapping[str, object] = field(default_factory=dict)
    redact: Callable[[str], str] | None = None
    source: SourceLocation = UNKNOWN

    def module(self, name: str) -> ModuleDecl | None:
        """The first module of that name, or None."""
        return next((m for m in self.modules if m.name == name), None)

    def models(self) -> Iterator[ModelDecl]:
        for module in self.modules:
            yield from module.models.values()

    def functions(self) -> Iterator[FunctionDecl]:
        for module in self.modules:
            yield from module.functions.values()

    def jobs(self) -> Iterator[JobDecl]:
        for module in self.modules:
            yield from module.jobs.values()

    def job(self, qualified_name: str) -> JobDecl | None:
        """The job `<module>.<job>`, or None."""
        module_name, _, job_name = qualified_name.partition(".")
        module = self.module(module_name)
        return module.jobs.get(job_name) if module else None

    def function(self, qualified_name: str) -> FunctionDecl | None:
        """The function `<module>.<function>`, or None."""
        module_name, _, function_name = qualified_name.partition(".")
        module = self.module(module_name)
        return module.functions.get(function_name) if module else None


def define_deployment(
    *,
    name: str,
    modules: Sequence[ModuleDecl],
    worker: Mapping[str, object] | None = None,
    redact: Callable[[str], str] | None = None,
    serve: Mapping[str, object] | None = None,
) -> DeploymentDecl:
    """Declare a deployment.

    `serve`, if given, says how `ket serve` serves the functions over HTTP: above all
    `{"authenticate": fn}`, where `fn(request)` returns the calling `ket.serve.Principal` or None
    (see docs/serve.md). Without an authenticator `ket serve` refuses to start.

    `redact`, if given, is called with the text of every exception a handler raises (message
    and traceback, after the values of the job's secret input fields are hidden) and returns
    the text to store and log in its place.

    Example::

        erp = define_deployment(
            name="erp",
            modules=[sales, hotel, company],
            worker={"queues": {"default": 2, "mail": 4}, "lease_ms": 30_000},
            redact=lambda text: CARD_NUMBER.sub("<card>", text),
            serve={"authenticate": authenticate},
        )
    """
    source = caller()
    if not isinstance(name, str):
        raise DeclarationError(f"{source.render()}: deployment name must be a string, got {name!r}")
    if isinstance(modules, str | bytes) or not isinstance(modules, Sequence):
        raise DeclarationError(
            f"{source.render()}: deployment {name!r}: modules must be a list of "
            f"define_module(...), got {modules!r}"
        )
    for module in modules:
        if not isinstance(module, ModuleDecl):
            raise DeclarationError(
                f"{source.render()}: deployment {name!r}: modules must be made with "
                f"define_module(...), got {module!r}"
            )
    if worker is not None and not isinstance(worker, Mapping):
        raise DeclarationError(
            f"{source.render()}: deployment {name!r}: worker must be a dict, got {worker!r}"
        )
    if serve is not None and not isinstance(serve, Mapping):
        raise DeclarationError(
            f"{source.render()}: deployment {name!r}: serve must be a dict, got {serve!r}"
        )
    if redact is not None and not callable(redact):
        raise DeclarationError(
            f"{source.render()}: deployment {name!r}: redact must be a function taking the "
            f"text of an exception and returning the text to keep, got {redact!r}"
        )
    return DeploymentDecl(
        name=name,
        modules=tuple(modules),
        worker=dict(worker or {}),
        serve=dict(serve or {}),
        redact=redact,
        source=source,
    )
