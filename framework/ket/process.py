"""The process: one owner for what a ket process shares.

A ket process (`ket worker`, `ket dev`, `ket serve`, an application with a client, a test
deployment) shares, across its tenants, stores, event loops and threads:

- the connection budget `ket worker` installs (`ket.connection.budget`): every PostgreSQL
  connection it opens counted in one place;
- its wake-ups: the in-process Wakeups of each database (`ket.wakeup.local`), the LISTEN
  connections (`ket.wakeup.listener`), the control channel's hint senders and routers
  (`ket.wakeup.control_channel`), the SQLite datagram sockets (`ket.wakeup.sqlite`);
- the hooks lifecycle events go to (`ket.runtime.events`, `from ket import hooks`);
- the name its PostgreSQL connections go by (`ket.connection.address.name_connections`).

They live on one `Process`, and nowhere else: no module keeps mutable state of its own
(`tests/unit/test_process_state.py` lists every module-level value and fails on a new one).
The process holds one instance of each *part*, a class its room defines, made on first use
(`current().part(Listeners)`); the room keeps the behaviour, the process the state, and this
module imports no room, so every room may ask it.

`current()` is the process's one Process. The entry points (`ket worker`, `ket dev`,
`ket serve`, `open_client`, `open_async_client`, `create_test_deployment`) start from it, and
`ket worker` gives it its budget; an application that runs a worker and a client in one process
has one budget and one set of wake-ups for both. A test that wants a process of its own enters
`fresh()`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

T = TypeVar("T")


class Process:
    """What one ket process shares; see the module's text."""

    def __init__(self) -> None:
        self._parts: dict[type[Any], Any] = {}
        self._lock = threading.Lock()

    def part(self, kind: type[T], make: Callable[[], T] | None = None) -> T:
        """The process's one `kind`, made by `make` (default: `kind()`) on first use."""
        found = self._parts.get(kind)
        if found is None:
            with self._lock:
                found = self._parts.get(kind)
                if found is None:
                    found = self._parts[kind] = (make or kind)()
        return cast(T, found)


# the one module-level slot of the package: which Process this process is (see `current`)
_CURRENT: list[Process] = [Process()]


def current() -> Process:
    """This process's Process."""
    return _CURRENT[-1]


@contextmanager
def fresh() -> Iterator[Process]:
    """Within the block, a new Process is the process's (for tests that need a budget, hooks or
    wake-ups of their own); the one before comes back after."""
    process = Process()
    _CURRENT.append(process)
    try:
        yield process
    finally:
        _CURRENT.remove(process)
