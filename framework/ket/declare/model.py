"""define_model: a table in each tenant's database, with an `id` ket generates."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ket.declare.source import UNKNOWN, SourceLocation, caller
from ket.errors import DeclarationError


@dataclass(frozen=True, kw_only=True)
class ModelDecl:
    """A declared model: field name -> shorthand type (as for inputs)."""

    fields: Mapping[str, object] = field(default_factory=dict)
    module: str = ""
    name: str = ""
    source: SourceLocation = UNKNOWN

    @property
    def qualified_name(self) -> str:
        return f"{self.module}.{self.name}"


def define_model(fields: Mapping[str, str]) -> ModelDecl:
    """Declare a model from a dict of field types.

    Example: ``define_model({"number": "string", "email": "string", "status": "string"})``
    """
    source = caller()
    if not isinstance(fields, Mapping):
        raise DeclarationError(
            f"{source.render()}: define_model takes a dict of field name to type, got {fields!r}"
        )
    return ModelDecl(fields=dict(fields), source=source)
