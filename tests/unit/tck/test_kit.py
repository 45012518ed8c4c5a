"""The conformance kit itself: every area's tests are exported, runnable, and contract-only."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

import ket.tck
from ket.store.clock import Clock

KIT = Path(ket.tck.__file__).resolve().parent
SUPPORT = {"__init__", "harness", "arrange"}
# What the kit may import from ket: the contract, its values, the clock seam and the errors.
CONTRACT = {"ket.store", "ket.store.types", "ket.store.contract", "ket.store.clock", "ket.errors"}


def _area_names() -> list[str]:
    return sorted(p.stem for p in KIT.glob("*.py") if p.stem not in SUPPORT)


def _tests_of(area: str) -> list[str]:
    module = importlib.import_module(f"ket.tck.{area}")
    return sorted(name for name in vars(module) if name.startswith("test_"))


def test_every_area_module_is_listed_as_an_area() -> None:
    assert sorted(ket.tck.AREAS) == _area_names()


@pytest.mark.parametrize("area", _area_names())
def test_every_test_of_an_area_is_in_its_all_and_in_the_kit(area: str) -> None:
    module = importlib.import_module(f"ket.tck.{area}")
    assert sorted(module.__all__) == _tests_of(area)
    assert set(module.__all__) <= set(ket.tck.__all__)


def test_the_kit_exports_each_test_once_plus_its_harness() -> None:
    tests = [name for area in _area_names() for name in _tests_of(area)]
    assert len(tests) == len(set(tests)), "two areas define a test of the same name"
    harness = ["FaultyStoreFactory", "Outage", "StoreFactory", "Tck", "tck_test"]
    assert sorted(ket.tck.__all__) == sorted([*tests, *harness])
    star: dict[str, object] = {}
    exec("from ket.tck import *", star)
    assert set(tests) <= set(star)


@pytest.mark.parametrize("area", _area_names())
def test_every_kit_test_takes_only_the_store_factory_fixture(area: str) -> None:
    module = importlib.import_module(f"ket.tck.{area}")
    for name in module.__all__:
        signature = inspect.signature(getattr(module, name))
        assert list(signature.parameters) == ["ket_store_factory"], name


def _ket_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("path", sorted(KIT.glob("*.py")), ids=lambda p: p.name)
def test_the_kit_imports_only_the_contract_stdlib_and_pytest(path: Path) -> None:
    allowed_roots = {"pytest", "__future__", *sys.stdlib_module_names}
    offenders = {
        name
        for name in _ket_imports(path)
        if not (
            name in CONTRACT
            or name == "ket.tck"
            or name.startswith("ket.tck.")
            or name.split(".")[0] in allowed_roots
        )
    }
    assert offenders == set()


@pytest.mark.parametrize("area", sorted(ket.tck.AREAS))
def test_the_kit_asserts_are_rewritten_by_pytest(area: str) -> None:
    """A failing kit test explains itself (values compared), not just 'AssertionError'."""
    loader = importlib.import_module(f"ket.tck.{area}").__loader__
    assert type(loader).__name__ == "AssertionRewritingHook"


class _BareStore:
    """A store with no capability at all (only close is ever reached here)."""

    closed = False

    async def close(self) -> None:
        self.closed = True


class _BareFactory:
    def __init__(self) -> None:
        self.store = _BareStore()
        self.cleaned = False

    async def open(self, clock: Clock | None) -> _BareStore:
        return self.store

    async def cleanup(self) -> None:
        self.cleaned = True


@pytest.mark.parametrize(
    ("test_name", "capability"),
    [
        ("test_job_get_of_an_unknown_id_is_none", "QueryableStore"),
        ("test_wait_for_jobs_times_out_with_false_when_nothing_is_inserted", "PushStore"),
        ("test_transaction_jobs_exist_after_commit", "TransactionalStore"),
    ],
)
def test_a_missing_capability_skips_visibly_and_cleans_up(test_name: str, capability: str) -> None:
    factory = _BareFactory()
    with pytest.raises(pytest.skip.Exception, match=f"_BareStore lacks capability {capability}"):
        getattr(ket.tck, test_name)(factory)
    assert (factory.store.closed, factory.cleaned) == (True, True)


def test_a_factory_that_cannot_fail_on_demand_skips_the_fault_tests_visibly() -> None:
    factory = _BareFactory()
    name = "test_a_failing_database_raises_store_error_from_every_operation_and_the_handle_recovers"
    test = getattr(ket.tck, name)
    with pytest.raises(
        pytest.skip.Exception, match="_BareFactory lacks capability FaultyStoreFactory"
    ):
        test(factory)
    assert (factory.store.closed, factory.cleaned) == (True, True)
