"""Input JSON schemas compared field by field, as pydantic generates them.

A field's type is its property schema with `$ref`s inlined from the schema's own `$defs` and the
annotations (title, description, default, examples) ignored; an optional field is
`anyOf [X, null]`, so becoming optional is not a type change. Secrecy (`writeOnly: true` with
`format: password`, as pydantic writes SecretStr and SecretBytes) is not a type either: queued
rows of a field that becomes secret, or stops being one, still validate, so it is reported on
its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from deepdiff import DeepDiff

from ket.diff.rule import Finding

Schema = dict[str, Any]

ANNOTATIONS = ("title", "description", "default", "examples")
# Under these keys the names are field names, never keywords, so a field called `title` counts.
_NAMED = ("properties", "patternProperties")
# A DeepDiff path ending in an annotation keyword, e.g. root['properties']['qty']['title'].
_ANNOTATION_PATH = "".join(rf"(?<!\['{named}'\])" for named in _NAMED) + (
    rf"\['(?:{'|'.join(ANNOTATIONS)})'\]$"
)
_UNORDERED = ("required", "enum", "anyOf", "oneOf", "type")
_NULL: Schema = {"type": "null"}
_ROOT_KEYS = ("properties", "required", "additionalProperties", *ANNOTATIONS)


def input_findings(old: Schema, new: Schema, *, who: str) -> list[Finding]:
    """What changed in an input schema; `who` names what sends it ("rows already queued")."""
    old_root, new_root = inline_refs(old), inline_refs(new)
    if _comparable(old_root, new_root):
        return _closure(old_root, new_root, who) + _properties(old_root, new_root, who)
    return _replaced(old, new, who) if schema_diff(old_root, new_root) else []


def inline_refs(schema: Schema) -> Schema:
    """The schema with every `#/$defs/...` reference replaced by its definition."""
    defs = schema.get("$defs", {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    inlined: Schema = _inline(body, defs if isinstance(defs, dict) else {}, ())
    return inlined


def schema_diff(old: object, new: object) -> list[str]:
    """Paths at which two schema fragments differ in what they accept, annotations ignored."""
    diff = DeepDiff(
        old,
        new,
        exclude_regex_paths=[_ANNOTATION_PATH],
        ignore_order_func=lambda level: any(
            level.path().endswith(f"['{key}']") for key in _UNORDERED
        ),
        threshold_to_diff_deeper=0,
    )
    return sorted(_short(path) for path in diff.affected_paths)


def split_null(schema: Schema) -> tuple[Schema, bool]:
    """(the schema without its null alternative, whether it accepts null)."""
    options = schema.get("anyOf")
    if isinstance(options, list) and _NULL in options:
        rest = [option for option in options if option != _NULL]
        outer = {key: value for key, value in schema.items() if key != "anyOf"}
        return ({**outer, **rest[0]} if len(rest) == 1 else {**outer, "anyOf": rest}), True
    types = schema.get("type")
    if isinstance(types, list) and "null" in types:
        rest_types = [t for t in types if t != "null"]
        return {**schema, "type": rest_types[0] if len(rest_types) == 1 else rest_types}, True
    return schema, schema == _NULL


def describe(schema: Schema) -> str:
    """A short human name for a field's type: `integer`, `string (ket-id) or null`, `Address`."""
    base, nullable = split_null(schema)
    text = _describe_base(base)
    return f"{text} or null" if nullable else text


def _inline(node: Any, defs: Mapping[str, Any], seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, seen) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    name = ref.removeprefix("#/$defs/") if isinstance(ref, str) else None
    # A recursive model would inline forever; past the first level it stays a named reference.
    if name is not None and name in defs and name not in seen:
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return _inline({**defs[name], **siblings}, defs, (*seen, name))
    return {key: _inline(value, defs, seen) for key, value in node.items()}


def _comparable(old: Schema, new: Schema) -> bool:
    # Field by field only for two objects of named fields that agree on every other root keyword
    # (minProperties, patternProperties, ...): pydantic models never produce those, and a change
    # in one is not a change of any single field.
    return (
        _is_object(old)
        and _is_object(new)
        and not schema_diff(_outside_fields(old), _outside_fields(new))
    )


def _is_object(schema: Schema) -> bool:
    return schema.get("type") == "object" and isinstance(schema.get("properties"), dict)


def _outside_fields(schema: Schema) -> Schema:
    return {key: value for key, value in schema.items() if key not in _ROOT_KEYS}


def _replaced(old: Schema, new: Schema, who: str) -> list[Finding]:
    message = (
        f"input schema replaced by one that cannot be compared field by field; "
        f"{who} may fail validation"
    )
    return [Finding(kind="input_schema_replaced", message=message, old=old, new=new)]


def _closure(old: Schema, new: Schema, who: str) -> list[Finding]:
    was_closed = old.get("additionalProperties") is False
    is_closed = new.get("additionalProperties") is False
    if is_closed and not was_closed:
        message = f"input now refuses unknown fields; {who} that carry any would fail validation"
        return [Finding(kind="input_closed", message=message, old=False, new=True)]
    if was_closed and not is_closed:
        message = "input now accepts unknown fields"
        return [Finding(kind="input_opened", message=message, old=True, new=False)]
    return []


def _properties(old: Schema, new: Schema, who: str) -> list[Finding]:
    old_fields, new_fields = old["properties"], new["properties"]
    old_required, new_required = set(old.get("required", [])), set(new.get("required", []))
    closed = new.get("additionalProperties") is False
    found: list[Finding] = []
    for name in sorted(new_fields.keys() - old_fields.keys()):
        found.append(_added(name, new_fields[name], name in new_required, who))
    for name in sorted(old_fields.keys() - new_fields.keys()):
        found.append(_removed(name, old_fields[name], closed, who))
    for name in sorted(old_fields.keys() & new_fields.keys()):
        was, now = name in old_required, name in new_required
        found += _common(name, old_fields[name], new_fields[name], (was, now), who)
    return found


def _added(name: str, schema: Schema, required: bool, who: str) -> Finding:
    if required:
        message = (
            f"input gains required field {name!r} ({describe(schema)}); "
            f"{who} without it would fail validation"
        )
        return Finding(kind="input_field_added_required", message=message, new=schema)
    message = f"input gains optional field {name!r} ({describe(schema)})"
    return Finding(kind="input_field_added", message=message, new=schema)


def _removed(name: str, schema: Schema, closed: bool, who: str) -> Finding:
    if closed:
        message = (
            f"input field {name!r} removed and unknown fields are refused; "
            f"{who} that carry it would fail validation"
        )
        return Finding(kind="input_field_removed", message=message, old=schema)
    message = f"input field {name!r} removed; unknown fields are accepted, so nothing fails"
    return Finding(kind="input_field_removed_tolerated", message=message, old=schema)


def _common(
    name: str, old: Schema, new: Schema, required: tuple[bool, bool], who: str
) -> list[Finding]:
    was, now = required
    found = _requiredness(name, old, new, was, now, who)
    old_base, old_null = split_null(_without_secrecy(old))
    new_base, new_null = split_null(_without_secrecy(new))
    # Becoming required already says null-by-omission is gone; becoming optional already says
    # null is welcome: one finding per field is enough.
    if paths := schema_diff(old_base, new_base):
        found.append(_type_changed(name, old, new, paths, who))
    elif old_null and not new_null and not (now and not was):
        message = f"input field {name!r} no longer accepts null; {who} with null would fail"
        found.append(Finding(kind="input_field_type_changed", message=message, old=old, new=new))
    elif new_null and not old_null and not (was and not now):
        message = f"input field {name!r} now accepts null"
        found.append(Finding(kind="input_field_nullable", message=message, old=old, new=new))
    found += _secrecy(name, old, new)
    if not found and old != new:
        found.append(_annotation_changed(name, old, new))
    return found


def _secrecy(name: str, old: Schema, new: Schema) -> list[Finding]:
    """A field (or a part of it) that becomes secret, or stops being one."""
    was, now = set(_secret_parts(old, name)), set(_secret_parts(new, name))
    found = []
    if now - was:
        parts = ", ".join(repr(part) for part in sorted(now - was))
        message = f"input {parts} becomes secret: shown as ***, sealed at rest when keys are set"
        found.append(Finding(kind="input_field_secret", message=message, old=old, new=new))
    if was - now:
        parts = ", ".join(repr(part) for part in sorted(was - now))
        message = f"input {parts} is no longer secret: its values will be shown and stored in clear"
        found.append(Finding(kind="input_field_not_secret", message=message, old=old, new=new))
    return found


def _secret_parts(node: Any, path: str) -> list[str]:
    """Where a field's schema marks a secret: the field itself, or `field.inner` parts."""
    if isinstance(node, list):
        return [part for item in node for part in _secret_parts(item, path)]
    if not isinstance(node, dict):
        return []
    if node.get("writeOnly") is True:
        return [path]
    parts = []
    for key, value in node.items():
        if key in _NAMED and isinstance(value, dict):
            for field, schema in value.items():
                parts += _secret_parts(schema, f"{path}.{field}")
        elif key not in ANNOTATIONS:
            parts += _secret_parts(value, path)
    return parts


def _without_secrecy(node: Any) -> Any:
    """A schema fragment without the marks of a secret (compared on their own)."""
    if isinstance(node, list):
        return [_without_secrecy(item) for item in node]
    if not isinstance(node, dict):
        return node
    kept: dict[str, Any] = {}
    for key, value in node.items():
        if key in _NAMED and isinstance(value, dict):  # field names here, never keywords
            kept[key] = {field: _without_secrecy(schema) for field, schema in value.items()}
        elif not _is_secrecy(key, value):
            kept[key] = _without_secrecy(value)
    return kept


def _is_secrecy(key: str, value: object) -> bool:
    return (key == "writeOnly" and value is True) or (key == "format" and value == "password")


def _annotation_changed(name: str, old: Schema, new: Schema) -> Finding:
    diff = DeepDiff(old, new, threshold_to_diff_deeper=0)
    keys = sorted({key for path in diff.affected_paths if (key := _annotation_in(path))})
    if keys:
        message = f"input field {name!r} changes only its annotations ({', '.join(keys)})"
    else:
        message = f"input field {name!r} is written differently with the same meaning"
    return Finding(kind="input_field_annotation_changed", message=message, old=old, new=new)


def _requiredness(
    name: str, old: Schema, new: Schema, was: bool, now: bool, who: str
) -> list[Finding]:
    if now and not was:
        message = f"input field {name!r} becomes required; {who} without it would fail validation"
        return [Finding(kind="input_field_required", message=message, old=old, new=new)]
    if was and not now:
        message = f"input field {name!r} becomes optional"
        return [Finding(kind="input_field_optional", message=message, old=old, new=new)]
    return []


def _type_changed(name: str, old: Schema, new: Schema, paths: list[str], who: str) -> Finding:
    before, after = describe(old), describe(new)
    change = f"from {before} to {after}" if before != after else f"at {', '.join(paths)}"
    message = (
        f"input field {name!r} changes type {change}; {who} with the old type would fail validation"
    )
    return Finding(kind="input_field_type_changed", message=message, old=old, new=new)


def _annotation_in(path: str) -> str | None:
    # The first annotation keyword on a DeepDiff path, skipping field names that merely look
    # like one: in root['properties']['title']['default'] it is `default`.
    keys = re.findall(r"\['([^']*)'\]", path)
    for parent, key in zip(["", *keys], keys, strict=False):
        if key in ANNOTATIONS and parent not in _NAMED:
            return str(key)
    return None


def _describe_base(schema: Schema) -> str:
    kind = schema.get("type")
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {describe(schema['items'])}"
    if kind == "object" and isinstance(schema.get("title"), str):
        return str(schema["title"])
    if isinstance(kind, str):
        return f"{kind} ({schema['format']})" if "format" in schema else kind
    if isinstance(schema.get("anyOf"), list):
        return " | ".join(describe(option) for option in schema["anyOf"])
    if isinstance(schema.get("$ref"), str):
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    return json.dumps(schema, sort_keys=True)


def _short(path: str) -> str:
    # "root['items']['anyOf'][0]" -> "items.anyOf[0]": readable in a one-line message.
    return re.sub(r"\['([^']*)'\]", r".\1", path).removeprefix("root").removeprefix(".")
