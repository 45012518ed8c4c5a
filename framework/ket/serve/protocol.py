"""uvicorn's HTTP/1.1 protocol with the limits it lacks against slow clients.

uvicorn bounds the idle time between two requests of a connection (its keep-alive timeout), but
not the time a request takes to arrive: a client that sends one header line every few seconds,
or its body a byte a second, holds its connection (and a file descriptor) for as long as it
likes, and a few hundred such clients, without any credentials, leave the server no room to
answer anyone. An ASGI middleware cannot help, since the app sees a request only once its
headers are in. So the protocol itself keeps three limits (`ClientLimits`):

- a request's line and headers must arrive within `head_seconds` of the connection, or of the
  previous response on a kept-alive connection;
- its body within `body_seconds` of its headers;
- at most `max_clients` connections are open at once. When one more comes, the connection that
  has waited longest for a request to arrive is closed to make room (a client whose request is
  in and being answered is never closed for it): a normal client's request arrives in
  milliseconds, so slow ones cannot crowd it out, however many they open.

A connection closed for a limit gets no answer (as nginx closes a slow client's); each is counted,
and said in one WARNING line a minute at most, with the count for each reason ("request headers
not in within 10 s: 200, body not in within 30 s: 2, evicted at 256 open connections: 10").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("ket.serve")

SAY_EVERY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class ClientLimits:
    """How long a request may take to arrive, and how many connections may be open."""

    head_seconds: float = 10.0
    body_seconds: float = 30.0
    max_clients: int = 1000


class _Tally:
    """Connections closed for a limit, said once a minute at most."""

    def __init__(self) -> None:
        self.closed: Counter[str] = Counter()
        self.said_at = -SAY_EVERY_SECONDS

    def count(self, why: str) -> None:
        self.closed[why] += 1
        now = time.monotonic()
        if now - self.said_at < SAY_EVERY_SECONDS:
            return
        total = sum(self.closed.values())
        parts = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.closed.items()))
        log.warning(
            "slow clients: closed %d connection(s) in the last minute (%s); a reverse proxy in "
            "front buffers requests and spares the server these (docs/serve.md)",
            total,
            parts,
        )
        self.closed.clear()
        self.said_at = now


class GuardedH11Protocol(H11Protocol):
    """H11Protocol with the limits of `limits` (see the module's text); made per server by
    `guarded_protocol`."""

    limits: ClassVar[ClientLimits] = ClientLimits()
    tally: ClassVar[_Tally] = _Tally()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._phase: str | None = None  # "head" or "body" while a request is arriving
        self._since = 0.0  # when the current phase began (loop time)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_clients:
            self._evict_one()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    # -- the deadlines ----------------------------------------------------------------------

    def _follow(self) -> None:
        """Arm the deadline of what the client is sending now, if it changed."""
        if self.transport.is_closing():
            self._arm(None)
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            self._arm("head")
        elif state is h11.SEND_BODY:
            self._arm("body")
        else:  # the request is in (or the connection is ending): the app has it
            self._arm(None)

    def _arm(self, phase: str | None) -> None:
        if phase == self._phase:
            return
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is None:
            return
        self._since = self.loop.time()
        seconds = self.limits.head_seconds if phase == "head" else self.limits.body_seconds
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _too_slow(self) -> None:
        self._deadline = None
        phase = self._phase
        if phase == "head":
            why = f"request headers not in within {self.limits.head_seconds:g} s"
        else:
            why = f"body not in within {self.limits.body_seconds:g} s"
        self._close(why)

    def _evict_one(self) -> None:
        """Close the connection that has waited longest for its request to arrive (this new
        one, if every other is being answered)."""
        waiting = [c for c in self.connections if isinstance(c, GuardedH11Protocol) and c._phase]
        oldest = min(waiting, key=lambda c: c._since, default=self)
        oldest._close(f"evicted at {self.limits.max_clients} open connections")

    def _close(self, why: str) -> None:
        self._arm(None)
        if self.cycle is not None and not self.cycle.response_complete:
            # the app awaits the body: it sees the client gone
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.close()
        self.tally.count(why)


def guarded_protocol(limits: ClientLimits) -> type[GuardedH11Protocol]:
    """The protocol class of one server, with its limits and its own tally."""
    return type(
        "GuardedH11Protocol",
        (GuardedH11Protocol,),
        {"limits": limits, "tally": _Tally()},
    )
