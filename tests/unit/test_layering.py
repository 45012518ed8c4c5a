"""Data flows one way between the rooms of the package: every import of framework/ket is held
against the rules of docs/rooms.json (the rooms, and which may never import which), so the
picture in docs/architecture.md and the code cannot drift apart."""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "framework" / "ket"
ROOMS: dict[str, Any] = json.loads((ROOT / "docs" / "rooms.json").read_text(encoding="utf-8"))


def room_of(relative: str) -> str | None:
    """The room of a file (a path inside framework/ket): the longest path of a room holding it."""
    best, length = None, -1
    for name, room in ROOMS["rooms"].items():
        for path in room["is"]:
            holds = relative.startswith(path) if path.endswith("/") else relative == path
            if holds and len(path) > length:
                best, length = name, len(path)
    return best


def _file_of(module: str) -> str | None:
    """The file of a module of the package (`ket.store.sql.lane` -> store/sql/lane.py)."""
    parts = module.split(".")[1:]
    for candidate in ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])):
        if parts and (PACKAGE / candidate).is_file():
            return candidate
    return "__init__.py" if not parts else None


def _imported(node: ast.AST) -> Iterator[str]:
    """The modules of the package an import statement reaches (`from ket.store.sql import lane`
    reaches ket.store.sql.lane, not the package's __init__)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name.startswith("ket"))
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "ket":
        modules = [f"{node.module}.{alias.name}" for alias in node.names]
        found = [module for module in modules if _file_of(module) is not None]
        yield from found or [node.module]


@functools.cache
def edges() -> frozenset[tuple[str, str, str]]:
    """(room, room it imports, file: module) for every import across rooms."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = str(path.relative_to(PACKAGE))
        source = room_of(relative)
        assert source is not None, f"{relative} is in no room of docs/rooms.json"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for module in _imported(node):
                file = _file_of(module)
                while file is None:  # `from ket.x import name`: the module x
                    module = module.rpartition(".")[0]
                    file = _file_of(module)
                target = room_of(file)
                if target is not None and target != source:
                    found.add((source, target, f"{relative}: {module}"))
    return frozenset(found)


def _rooms(given: str | list[str]) -> set[str]:
    return set(ROOMS["rooms"]) if given == "*" else set(given)


def forbidden() -> dict[tuple[str, str], str]:
    """(room, room) -> why it may never import it, from the rules."""
    pairs: dict[tuple[str, str], str] = {}
    for rule in ROOMS["never"]:
        allowed = set(rule.get("except", ()))
        for source in _rooms(rule["from"]) - allowed:
            for target in _rooms(rule["to"]) - allowed - {source}:
                pairs.setdefault((source, target), rule["why"])
    return pairs


def test_the_rules_name_only_rooms_there_are() -> None:
    named = set()
    for rule in ROOMS["never"]:
        for key in ("from", "to", "except"):
            given = rule.get(key, [])
            named |= set() if given == "*" else set(given)
    assert named - set(ROOMS["rooms"]) == set()


def test_every_room_holds_a_file() -> None:
    for name, room in ROOMS["rooms"].items():
        for path in room["is"]:
            assert (PACKAGE / path).exists(), f"room {name}: {path} is not in framework/ket"


@pytest.mark.parametrize("room", sorted(ROOMS["rooms"]))
def test_no_room_imports_a_room_it_may_never_import(room: str) -> None:
    rules = forbidden()
    broken = sorted(
        f"{where} ({source} -> {target}: {rules[source, target]})"
        for source, target, where in edges()
        if source == room and (source, target) in rules
    )
    assert broken == []


def test_the_rules_catch_an_import_against_them() -> None:
    # the test above would pass on a rule set that forbids nothing: prove that it forbids
    rules = forbidden()
    assert ("sql", "runtime") in rules
    assert ("runtime", "sql") in rules
    assert ("declare", "store") in rules
    assert ("serve", "cli") in rules
    assert ("process", "store") in rules
    assert room_of("connection/budget.py") == "connections"
    assert room_of("store/sql/query.py") == "sql"


def test_the_architecture_page_names_every_room() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in ROOMS["rooms"] if f"| `{name}` |" not in page]
    assert missing == []
