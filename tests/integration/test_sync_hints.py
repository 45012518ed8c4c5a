"""A synchronous client's wake-up hints on the control database (SyncHints): threads that commit
while a hint is on its way send theirs together in the next send, and every hint arrives."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from ket.wakeup.control_channel import SyncHints, hint
from ket.wakeup.listener import CHANNEL


class _Slow:
    """The hints' connection, counting its sends; the first holds the line for a moment, as a
    send does while the notification lock is taken."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.connection = connection
        self.sends: list[list[str]] = []
        self.closed = False

    def execute(self, query: str, params: tuple[list[str]], **options: Any) -> Any:
        self.sends.append(list(params[0]))
        if len(self.sends) == 1:
            time.sleep(0.3)
        return self.connection.execute(query, params, **options)


def test_threads_committing_while_a_hint_is_sent_send_theirs_together(postgres_url: str) -> None:
    threads = 16
    with (
        psycopg.connect(postgres_url, autocommit=True) as listening,
        psycopg.connect(postgres_url, autocommit=True) as sending,
    ):
        listening.execute(f"LISTEN {CHANNEL}")
        hints = SyncHints(postgres_url, "acme")
        slow = _Slow(sending)
        hints._connection = slow  # type: ignore[assignment]
        first = threading.Thread(target=hints.sent, args=(["q0"],))
        first.start()
        while not slow.sends:  # the first send is on its way
            time.sleep(0.01)
        others = [threading.Thread(target=hints.sent, args=([f"q{n}"],)) for n in range(1, threads)]
        for thread in others:
            thread.start()
        for thread in [first, *others]:
            thread.join(10)
        heard = {note.payload for note in listening.notifies(timeout=2, stop_after=threads)}
    assert heard == {hint("acme", f"q{n}") for n in range(threads)}
    # the first alone; the fifteen that came while it was sent in one send after it
    assert len(slow.sends) == 2, slow.sends
    assert sorted(slow.sends[1]) == sorted(hint("acme", f"q{n}") for n in range(1, threads))
