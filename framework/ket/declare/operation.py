"""What functions and jobs share: a handler, an input, effects, and the cross-company flag."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ket.declare.source import UNKNOWN, SourceLocation
from ket.errors import DeclarationError

Handler = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class OperationDecl:
    """A declared function or job, as the user wrote it (validated by `ket check`)."""

    handler: Handler
    input: object = None
    effects: tuple[object, ...] = ()
    cross_company: bool = False
    module: str = ""
    name: str = ""
    source: SourceLocation = UNKNOWN

    @property
    def qualified_name(self) -> str:
        """`<module>.<name>`, the name used to call or enqueue it."""
        return f"{self.module}.{self.name}"

    @property
    def title(self) -> str:
        return self.qualified_name if self.module else self.name or "<unbound>"


def effect_tuple(effects: object, source: SourceLocation) -> tuple[object, ...]:
    """Effects as a tuple; each string is checked by `ket check`, the container here."""
    if effects is None:
        return ()
    if isinstance(effects, str) or not isinstance(effects, list | tuple | set | frozenset):
        raise DeclarationError(
            f"{source.render()}: effects must be a list of strings such as "
            f"['read:sales.Order'], got {effects!r}"
        )
    return tuple(effects)
