"""Input declarations: a shorthand dict of field types, or a pydantic model class.

Either way the handler receives a validated pydantic model instance. Shorthand types:
`id`, `string`, `int`, `number`, `bool`, `datetime`, `date`, `json`, and for input only
`secret` (a string the handler reads with `.get_secret_value()`, never shown: see ket.secret);
a trailing `?` makes the field optional (default None). Shorthand models refuse unknown fields,
so a misspelt field name is a validation error at enqueue time rather than a silently dropped
value.
"""

from __future__ import annotations

import datetime as dt
import keyword
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SecretStr,
    create_model,
)

from ket.errors import InputSpecError

Id = Annotated[str, Field(min_length=1, json_schema_extra={"format": "ket-id"})]

SHORTHAND_TYPES: Mapping[str, Any] = {
    "id": Id,
    "string": str,
    "int": int,
    "number": float,
    "bool": bool,
    "datetime": AwareDatetime,
    "date": dt.date,
    "json": JsonValue,
}
# Types an input field may have but a model field may not: a model row is not redacted.
INPUT_ONLY_TYPES: Mapping[str, Any] = {"secret": SecretStr}
FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

InputSpec = Mapping[str, str] | type[BaseModel] | None


def parse_field_type(
    field: str, spec: object, types: Mapping[str, Any] = SHORTHAND_TYPES
) -> tuple[Any, bool]:
    """One shorthand type -> (python type, required), or InputSpecError naming the field."""
    if not isinstance(spec, str):
        raise InputSpecError(f"input field {field!r} must have a type name string, got {spec!r}")
    name, optional = (spec[:-1], True) if spec.endswith("?") else (spec, False)
    if name not in types:
        known = ", ".join(types)
        raise InputSpecError(
            f"input field {field!r} has unknown type {spec!r}; known types: {known}"
        )
    return types[name], not optional


def check_field_name(field: object) -> str:
    """A shorthand field name, or InputSpecError naming it."""
    if not isinstance(field, str) or not FIELD_NAME.fullmatch(field) or keyword.iskeyword(field):
        raise InputSpecError(
            f"input field name {field!r} must be an identifier starting with a letter"
        )
    return field


def _input_field_name(field: object) -> str:
    """A shorthand input field name that pydantic can hold, or InputSpecError naming it."""
    name = check_field_name(field)
    # pydantic raises ValueError for 'model_dump', silently drops 'model_config' and warns for
    # 'json' or 'copy': each a name BaseModel already uses, so refuse them with a clear message.
    if hasattr(BaseModel, name):
        raise InputSpecError(
            f"input field name {name!r} is taken by pydantic's BaseModel; choose another name"
        )
    return name


def build_input_model(spec: object, title: str) -> type[BaseModel]:
    """Compile an input declaration to a pydantic model class (titled `title` in JSON schema)."""
    if spec is None:
        spec = {}
    if isinstance(spec, type) and issubclass(spec, BaseModel):
        return spec
    if not isinstance(spec, Mapping):
        raise InputSpecError(
            f"input must be a dict of field types or a pydantic model class, got {spec!r}"
        )
    fields: dict[str, Any] = {}
    types = {**SHORTHAND_TYPES, **INPUT_ONLY_TYPES}
    for field, type_spec in spec.items():
        python_type, required = parse_field_type(_input_field_name(field), type_spec, types)
        fields[field] = (python_type, ...) if required else (python_type | None, None)
    model: type[BaseModel] = create_model(
        title,
        __config__=ConfigDict(extra="forbid", frozen=True, title=title),
        **fields,
    )
    return model


def required_fields(model: type[BaseModel]) -> list[str]:
    """Names of the fields a caller must supply."""
    return sorted(name for name, info in model.model_fields.items() if info.is_required())
