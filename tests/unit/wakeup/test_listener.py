"""`bounded`, the listener's wait for a statement on a connection that may hang: a wait that is
cancelled (the worker stops) closes the connection, and the statement's failure that follows is
retrieved, not logged later as a stray task's."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Any

import pytest

from ket.wakeup.listener import ProbeTimeout, bounded


class _Connection:
    """A connection whose statement fails once it is closed, as psycopg's does: its own error,
    even when it was cancelled meanwhile."""

    def __init__(self) -> None:
        self.closed = asyncio.Event()

    async def close(self) -> None:
        self.closed.set()

    async def execute(self) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self.closed.wait()
        raise RuntimeError("consuming input failed: the connection is closed")


def _stray(scenario: Any) -> list[str]:
    """What the loop's exception handler heard while `scenario` ran and its garbage went."""
    heard: list[str] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: heard.append(context["message"])
        )
        await scenario()
        gc.collect()
        await asyncio.sleep(0)

    asyncio.run(main())
    return heard


def test_a_cancelled_wait_closes_the_connection_and_retrieves_the_failure() -> None:
    async def scenario() -> None:
        connection = _Connection()
        waiting = asyncio.ensure_future(
            bounded(connection, connection.execute(), 30.0, "LISTEN")  # type: ignore[arg-type]
        )
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert connection.closed.is_set()

    assert _stray(scenario) == []


def test_a_wait_that_times_out_says_so_and_leaves_no_stray_failure() -> None:
    async def scenario() -> None:
        connection = _Connection()
        with pytest.raises(ProbeTimeout, match=r"LISTEN got no answer in 0\.05 s"):
            await bounded(connection, connection.execute(), 0.05, "LISTEN")  # type: ignore[arg-type]

    assert _stray(scenario) == []
