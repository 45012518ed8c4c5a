"""What an input schema read back from a manifest may hold before anything compares it.

`ket diff` reads the schemas pydantic wrote: it inlines `$ref`s from `$defs` and walks the
keywords below. A hand-written schema could make that fail (a `required` that is a number) or
explode: definitions that each reference the next one twice inline to 2**n nodes from a few
kilobytes. Such schemas are refused when the manifest is loaded, naming where they go wrong.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Far above what pydantic writes (tens to hundreds of nodes per schema), low enough that comparing
# a schema at the cap takes well under a second, and the whole manifest some seconds at most.
MAX_INLINED_NODES = 5_000
MAX_INLINED_TOTAL = 100_000
# DeepDiff recurses a few frames per level: 100 levels stay far from Python's recursion limit.
MAX_INLINED_DEPTH = 100

# keyword -> how its value holds sub-schemas
_ONE = ("items", "additionalProperties", "not")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "$defs")


class SchemaProblem(ValueError):
    """An input schema that cannot be compared; the message says where and why."""


def check_input_schema(schema: Any, where: str) -> int:
    """Refuse a schema `ket diff` could not walk, or whose inlined form is too large; the number
    of nodes of its inlined form."""
    _check_json(schema, where)
    _check_shape(schema, where)
    return _inlined_size(schema, where)


def _check_json(schema: Any, where: str) -> None:
    # YAML can say more than JSON: dates, binary, sets, mappings keyed by numbers
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if not isinstance(key, str):
                    raise SchemaProblem(f"{path}: a key must be a string, got {key!r}")
                stack.append((value, f"{path}.{key}"))
        elif isinstance(node, list):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(node))
        elif node is not None and not isinstance(node, str | int | float):
            raise SchemaProblem(f"{path}: a value must be JSON, got {_kind(node)}")


def _check_shape(schema: Any, where: str) -> None:
    stack: list[tuple[Any, str]] = [(schema, where)]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict):
            raise SchemaProblem(f"{path}: a schema must be a mapping, got {_kind(node)}")
        stack.extend(_children(node, path))
        required = node.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaProblem(f"{path}.required: must be a list of field names")
        kind = node.get("type")
        if kind is not None and not (
            isinstance(kind, str)
            or (isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind))
        ):
            raise SchemaProblem(f"{path}.type: must be a type name or a list of them")
        if "$ref" in node and not isinstance(node["$ref"], str):
            raise SchemaProblem(f"{path}.$ref: must be a string, got {_kind(node['$ref'])}")


def _children(node: dict[str, Any], path: str) -> Iterator[tuple[Any, str]]:
    """The sub-schemas of one schema, with their paths (booleans, which JSON Schema allows
    for `items` and `additionalProperties`, are left out)."""
    for key in _ONE:
        if key in node and not isinstance(node[key], bool):
            yield node[key], f"{path}.{key}"
    for key in _MANY:
        if key in node:
            items = node[key]
            if not isinstance(items, list):
                raise SchemaProblem(f"{path}.{key}: must be a list of schemas")
            yield from ((item, f"{path}.{key}[{i}]") for i, item in enumerate(items))
    for key in _NAMED:
        if key in node:
            named = node[key]
            if not isinstance(named, dict):
                raise SchemaProblem(f"{path}.{key}: must be a mapping of schemas")
            yield from ((value, f"{path}.{key}.{name}") for name, value in named.items())


def _inlined_size(schema: dict[str, Any], where: str) -> int:
    # Walks the tree `ket diff` builds by inlining (a definition is inlined at every use, and
    # only once on any one path), counting its nodes, without building it.
    defs = schema.get("$defs", {})
    body = {key: value for key, value in schema.items() if key != "$defs"}
    stack: list[tuple[Any, tuple[str, ...], int]] = [(body, (), 1)]
    nodes = 0
    while stack:
        node, seen, depth = stack.pop()
        nodes += 1
        if nodes > MAX_INLINED_NODES:
            raise SchemaProblem(
                f"{where}: the schema grows past {MAX_INLINED_NODES} nodes once its $refs are "
                "inlined; a manifest's schemas are far smaller"
            )
        if depth > MAX_INLINED_DEPTH:
            raise SchemaProblem(
                f"{where}: the schema nests past {MAX_INLINED_DEPTH} levels once its $refs are "
                "inlined"
            )
        if isinstance(node, list):
            stack.extend((item, seen, depth + 1) for item in node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            name = ref.removeprefix("#/$defs/") if isinstance(ref, str) else None
            if name is not None and name in defs and name not in seen:
                siblings = {key: value for key, value in node.items() if key != "$ref"}
                stack.append(({**defs[name], **siblings}, (*seen, name), depth))
            else:
                stack.extend((value, seen, depth + 1) for value in node.values())
    return nodes


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__
