"""The harness the conformance kit runs every store through.

A store joins the kit by defining one pytest fixture, `ket_store_factory`, that returns a
StoreFactory for a fresh, empty database (one per test), then importing the kit::

    # tests/test_my_store.py
    import pytest
    from ket.tck import *  # noqa: F403  (the kit's tests)

    @pytest.fixture
    def ket_store_factory(tmp_path):
        return MyStoreFactory(tmp_path / "jobs.db")

Each kit test is an `async def` taking a Tck; the harness runs it on a fresh event loop, so the
kit needs no pytest plugin.

A factory that can also make a handle fail on demand (FaultyStoreFactory) lets the kit prove that
a failing database reaches callers as StoreError; without it those tests skip visibly.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar, runtime_checkable

import pytest

from ket.store.clock import Clock, ManualClock
from ket.store.contract import JobStore

# A fixed, ordinary instant: far from DST changes, so due times are easy to read in failures.
EPOCH = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)

C = TypeVar("C")


class StoreFactory(Protocol):
    """Opens handles on one fresh database; several handles act as replicas of one deployment."""

    async def open(self, clock: Clock | None) -> JobStore:
        """A new store handle on this test's database; `clock` None means the store's own time."""
        ...

    async def cleanup(self) -> None:
        """Drop the test's database (called once, after every handle is closed)."""
        ...


Outage = Callable[[], AbstractAsyncContextManager[object]]
"""`async with outage():` makes one handle's database fail until the block ends."""


@runtime_checkable
class FaultyStoreFactory(Protocol):
    """Capability of a factory: a handle whose database fails on demand, as a real one can."""

    async def open_faulty(self, clock: Clock | None) -> tuple[JobStore, Outage]:
        """Another handle on this test's database, and its outage.

        While the outage is open every operation of that handle that needs the database fails
        inside the store (say, no connection is free); afterwards the handle works again.
        """
        ...


class Tck:
    """What a kit test sees: the store under test, its clock, and more replicas on demand."""

    def __init__(self, factory: StoreFactory, store: JobStore, clock: ManualClock | None) -> None:
        self._factory = factory
        self.store = store
        self._clock = clock
        self._handles: list[JobStore] = [store]

    @property
    def clock(self) -> ManualClock:
        """The manual clock every handle of this test shares."""
        if self._clock is None:
            raise RuntimeError("this test runs on the store's own time; it has no manual clock")
        return self._clock

    async def replica(self) -> JobStore:
        """Another handle on the same database, with the same clock (closed by the harness)."""
        handle = await self._factory.open(self._clock)
        self._handles.append(handle)
        return handle

    async def faulty(self) -> tuple[JobStore, Outage]:
        """A handle that fails on demand (closed by the harness), or skip the test visibly."""
        if not isinstance(self._factory, FaultyStoreFactory):
            name = type(self._factory).__name__
            pytest.skip(f"store factory {name} lacks capability FaultyStoreFactory")
        handle, outage = await self._factory.open_faulty(self._clock)
        self._handles.append(handle)
        return handle, outage

    def require(self, capability: type[C]) -> C:
        """The store as `capability`, or skip the test visibly when the store lacks it."""
        if not isinstance(self.store, capability):
            pytest.skip(f"store {type(self.store).__name__} lacks capability {capability.__name__}")
        return self.store

    async def close(self) -> None:
        for handle in reversed(self._handles):
            await handle.close()


Scenario = Callable[[Tck], Awaitable[None]]


def run(factory: StoreFactory, scenario: Scenario, *, manual_clock: bool) -> None:
    """Run one scenario on a fresh event loop with a fresh database."""

    async def main() -> None:
        clock = ManualClock(EPOCH) if manual_clock else None
        store = await factory.open(clock)
        tck = Tck(factory, store, clock)
        try:
            await scenario(tck)
        finally:
            await tck.close()
            await factory.cleanup()

    asyncio.run(main())


def tck_test(fn: Scenario | None = None, *, store_time: bool = False) -> Any:
    """Turn `async def test_x(t: Tck)` into a pytest test that takes `ket_store_factory`.

    `store_time=True` runs the test on the store's own clock (the database's) instead of a
    manual clock.
    """

    def wrap(scenario: Scenario) -> Callable[[StoreFactory], None]:
        def test(ket_store_factory: StoreFactory) -> None:
            run(ket_store_factory, scenario, manual_clock=not store_time)

        # copy identity by hand: functools.wraps would make pytest read the scenario's signature
        test.__name__ = scenario.__name__
        test.__qualname__ = scenario.__qualname__
        test.__doc__ = scenario.__doc__
        test.__module__ = scenario.__module__
        test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("ket_store_factory", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        )
        return test

    return wrap(fn) if fn is not None else wrap
