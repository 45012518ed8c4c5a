"""Tests here load throwaway projects in this process, several of them with a package named
`app`: the project modules a test (or a module's fixture) imported are forgotten afterwards, so
the next one imports its own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _forget_projects(base: Path, path: list[str]) -> None:
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and Path(file).is_relative_to(base):
            del sys.modules[name]
    sys.path[:] = path


@pytest.fixture(autouse=True, scope="module")
def own_module_imports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Forget the projects a module's fixtures imported, once its tests are done."""
    path = list(sys.path)
    yield
    _forget_projects(tmp_path_factory.getbasetemp(), path)


@pytest.fixture(autouse=True)
def own_imports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Forget the projects a test imported that its module had not imported before it."""
    before, path = set(sys.modules), list(sys.path)
    yield
    base = tmp_path_factory.getbasetemp()
    for name in set(sys.modules) - before:
        file = getattr(sys.modules[name], "__file__", None)
        if file and Path(file).is_relative_to(base):
            del sys.modules[name]
    sys.path[:] = path
