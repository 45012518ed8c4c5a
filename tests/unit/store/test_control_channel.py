"""The control channel's router: each hint `tenant:queue` wakes that tenant's waiters, and the
echo of a hint this process sent skips the waiters that woke for it already."""

from __future__ import annotations

from collections.abc import Iterable

from ket.wakeup.control_channel import Router, hint
from ket.wakeup.local import Wakeups


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


def test_the_echoes_of_a_connection_that_went_away_are_not_awaited() -> None:
    """A send that failed, or a connection dropped before its echoes came: the next hint from
    that server process (sent after all, or a new process with the PID) wakes everyone."""
    router, worker, other = Router(), Recorded(), Recorded()
    router.add("acme", worker)
    router.add("acme", other)
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.expect(777, hint("acme", "default"), frozenset({worker}))
    router.forget(SENDER)
    router.heard_from(hint("acme", "default"), SENDER)
    assert (worker.woken, other.woken) == (["default"], ["default"])
    router.heard_from(hint("acme", "default"), 777)  # another connection's echo still counts
    assert (worker.woken, other.woken) == (["default"], ["default", "default"])


def test_a_reconnect_of_the_listener_awaits_no_echo_any_more() -> None:
    router, worker = Router(), Recorded()
    router.add("acme", worker)
    router.expect(SENDER, hint("acme", "default"), frozenset({worker}))
    router.notify_all()  # a reconnect: every tenant looks, and no echo is awaited any more
    router.heard_from(hint("acme", "default"), SENDER)
    assert worker.woken == ["default"]
