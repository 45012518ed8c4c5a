"""What a ket process shares lives on its Process (ket.process), never in a module: this test
lists every module-level value of the package that can change, and every function that writes
one, and fails on any but the few named below."""

from __future__ import annotations

import ast
import asyncio
import collections
import dataclasses
import importlib
import itertools
import pkgutil
import socket
import threading
from pathlib import Path
from typing import Any

import pydantic

import ket
from ket import process

# module-level state the package keeps on purpose, and why
ALLOWED = {
    "ket.process._CURRENT": "the one slot: which Process this process is",
    "ket.check.registry._CHECKS": "the checks, registered as their modules load and then fixed",
    "ket.context.signal._LOCK": "a lock for every abort signal: it guards no state of its own",
}

# what a module may hold: values, declarations, schema objects, caches of pure functions
CONTAINERS = (dict, list, set, bytearray, collections.deque)
MUTABLE = (
    itertools.count,
    socket.socket,
    threading.Event,
    asyncio.Event,
    asyncio.AbstractEventLoop,
    type(threading.Lock()),
    type(threading.RLock()),
)
# methods that change a container in place
CHANGES = {
    "append",
    "extend",
    "insert",
    "add",
    "update",
    "pop",
    "popitem",
    "clear",
    "remove",
    "discard",
    "setdefault",
    "appendleft",
}


def _modules() -> list[Any]:
    names = [info.name for info in pkgutil.walk_packages(ket.__path__, "ket.")]
    return [importlib.import_module(name) for name in sorted(names)]


def _constant_name(name: str) -> bool:
    return name.lstrip("_").replace("_", "").isupper()


def _mutable(name: str, value: Any) -> bool:
    if isinstance(value, MUTABLE):
        return True
    if isinstance(value, CONTAINERS):
        # a table named as a constant (SCREAMING_CASE) is one; the writes test below keeps it so
        return not _constant_name(name)
    kind = type(value)
    if not kind.__module__.startswith("ket.") or isinstance(value, type):
        return False
    if isinstance(value, pydantic.BaseModel):
        return not value.model_config.get("frozen", False)
    if dataclasses.is_dataclass(kind):
        return not kind.__dataclass_params__.frozen  # type: ignore[attr-defined]
    return not isinstance(value, tuple)  # a NamedTuple is a value


def test_no_module_keeps_state_of_its_own() -> None:
    found = {
        f"{module.__name__}.{name}"
        for module in _modules()
        for name in _assigned(_tree(module)) - {"__all__"}
        if _mutable(name, vars(module)[name])
    }
    assert found - set(ALLOWED) == set()


def _tree(module: Any) -> ast.Module:
    return ast.parse(Path(module.__file__).read_text(encoding="utf-8"))


def _assigned(tree: ast.Module) -> set[str]:
    """The names the module assigns at its top level (not those it imports or defines)."""
    return {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def _written_globals(tree: ast.Module) -> set[str]:
    """The module-level names a function of the module writes (or changes in place)."""
    assigned = _assigned(tree)
    written: set[str] = set()
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for function in functions:
        for node in ast.walk(function):
            if isinstance(node, ast.Global):
                written.update(node.names)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del):
                if isinstance(node.value, ast.Name):
                    written.add(node.value.id)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in CHANGES
                and isinstance(node.func.value, ast.Name)
            ):
                written.add(node.func.value.id)
    return written & assigned


def test_no_function_writes_module_state() -> None:
    found = {
        f"{module.__name__}.{name}"
        for module in _modules()
        for name in _written_globals(_tree(module))
    }
    assert found - set(ALLOWED) == set()


def test_the_allowed_state_is_there() -> None:
    # a name that moved or went leaves the list above stale: keep it true
    for dotted in ALLOWED:
        module, _, name = dotted.rpartition(".")
        assert hasattr(importlib.import_module(module), name), dotted


def test_a_fresh_process_shares_nothing_with_the_one_before() -> None:
    from ket.runtime.events import process_hooks
    from ket.wakeup.local import shared

    before = (process_hooks(), shared("postgresql://a/b"))
    with process.fresh() as mine:
        assert process.current() is mine
        assert process_hooks() is not before[0]
        assert shared("postgresql://a/b") is not before[1]
        assert shared("postgresql://a/b") is shared("postgresql://a/b")
    assert (process_hooks(), shared("postgresql://a/b")) == before
