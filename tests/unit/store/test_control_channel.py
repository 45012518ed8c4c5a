"""The control channel's router: each hint `tenant:queue` wakes that tenant's waiters, and the
echo of a hint this process sent skips the waiters that woke for it already."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from ket.store.sql import control_channel
from ket.store.sql.control_channel import ECHO_SECONDS, Router, hint
from ket.store.wakeup import Wakeups


class Recorded(Wakeups):
    def __init__(self) -> None:
        super().__init__()
        self.woken: list[str] = []

    def notify(self, queues: Iterable[str]) -> None:
        self.woken.extend(queues)


def test_a_hint_wakes_its_tenants_waiters_only() -> None:
    router, acme, globex = Router(), Recorded(), Recorded()
    router.add("acme", acme)
    router.add("globex", globex)
    router.notify([hint("acme", "mail"), "not a hint"])
    assert (acme.woken, globex.woken) == (["mail"], [])


SENDER = 4242  # the server process this process sends its hints from


def test_the_echo_of_a_hint_sent_here_skips_the_waiters_it_woke_and_only_once() -> None:
    router, worker, other = Router(), Recorded(), Recorded()
    router.add("acme", worker)
    router.add("acme", other)  # another store of the tenant in this process
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.heard_from(hint("acme", "default"), SENDER)  # the echo
    assert (worker.woken, other.woken) == ([], ["default"])
    router.heard_from(hint("acme", "default"), SENDER)  # a second send of it: nothing awaited
    assert (worker.woken, other.woken) == (["default"], ["default", "default"])


def test_a_hint_from_another_process_wakes_even_while_an_echo_is_awaited() -> None:
    """An application's enqueue heard before this worker's own echo of the same tenant and
    queue is not taken for it: its job starts now, not at the next visit."""
    router, worker = Router(), Recorded()
    router.add("acme", worker)
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.heard_from(hint("acme", "default"), 777)  # the application's hint comes first
    assert worker.woken == ["default"]
    router.heard_from(hint("acme", "default"), SENDER)  # then the echo, skipped
    assert worker.woken == ["default"]


def test_an_echo_whose_send_failed_is_not_awaited() -> None:
    router, worker = Router(), Recorded()
    router.add("acme", worker)
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.unexpect(SENDER, hint("acme", "default"))
    router.heard_from(hint("acme", "default"), SENDER)  # it was sent after all
    assert worker.woken == ["default"]


def test_an_echo_that_never_came_does_not_swallow_a_later_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000.0]
    monkeypatch.setattr(control_channel.time, "monotonic", lambda: now[0])
    router, worker, other = Router(), Recorded(), Recorded()
    router.add("acme", worker)
    router.add("acme", other)
    router.expect(SENDER, hint("acme", "default"), frozenset({worker, other}))
    now[0] += ECHO_SECONDS + 1  # the listener was away: that echo is lost
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.heard_from(hint("acme", "default"), SENDER)  # the second send's echo: it woke worker
    assert (worker.woken, other.woken) == ([], ["default"])
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.notify_all()  # a reconnect: every tenant looks, and no echo is awaited any more
    router.heard_from(hint("acme", "default"), SENDER)
    assert worker.woken == ["default"]
