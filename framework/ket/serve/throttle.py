"""A per-client backoff after failed authentications, so that tokens cannot be guessed at speed.

    throttle = Throttle()
    throttle.check(client)      # Refusal (429, Retry-After) while the client must wait
    throttle.failed(client)     # the authenticator refused it
    throttle.passed(client)     # it accepted it: the count starts again

A client (its address, as uvicorn gives it: behind a trusted proxy, the address the proxy
forwards) may fail FREE_FAILURES times; after that each failure makes it wait before the
authenticator is asked again, 1 s after the first and twice as long after each further one, up
to MAX_WAIT_SECONDS. Meanwhile its requests are refused with 429 and `Retry-After`, without
asking the authenticator: a slow authenticator is not made to work for a guesser either.
FORGIVE_SECONDS after its last failure a client starts again from nothing. At most MAX_CLIENTS
are kept, the longest quiet forgotten first, so a flood from many addresses costs bounded
memory. One WARNING line a minute at most says who is held back.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ket.serve.refusal import Refusal

log = logging.getLogger("ket.serve")

FREE_FAILURES = 10
FIRST_WAIT_SECONDS = 1.0
MAX_WAIT_SECONDS = 60.0
FORGIVE_SECONDS = 600.0
MAX_CLIENTS = 10_000
SAY_EVERY_SECONDS = 60.0


@dataclass(slots=True)
class _Client:
    failures: int = 0
    last_failure: float = 0.0
    wait_until: float = 0.0


class Throttle:
    """Failed authentications by client, and the waits they earn (see the module's text)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._said_at = -SAY_EVERY_SECONDS
        self._held = 0  # requests refused since the last line

    def check(self, client: str | None) -> None:
        """Refusal (429) while `client` must wait after its failures."""
        if client is None:
            return
        known = self._clients.get(client)
        if known is None:
            return
        now = self._clock()
        if now - known.last_failure > FORGIVE_SECONDS:
            del self._clients[client]
            return
        left = known.wait_until - now
        if left > 0:
            self._held += 1
            self._say(client, known)
            seconds = max(1, math.ceil(left))
            raise Refusal(
                429,
                "too_many_failures",
                f"too many failed authentications from this client: try again in {seconds} s",
                headers={"Retry-After": str(seconds)},
            )

    def failed(self, client: str | None) -> None:
        """The authenticator refused `client`'s request."""
        if client is None:
            return
        now = self._clock()
        known = self._clients.pop(client, None) or _Client()
        if now - known.last_failure > FORGIVE_SECONDS:
            known = _Client()
        known.failures += 1
        known.last_failure = now
        over = known.failures - FREE_FAILURES
        if over > 0:
            wait = min(FIRST_WAIT_SECONDS * 2.0 ** (over - 1), MAX_WAIT_SECONDS)
            known.wait_until = now + wait
        self._clients[client] = known  # the most recent last
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)

    def passed(self, client: str | None) -> None:
        """The authenticator accepted `client`'s request: its failures are forgotten."""
        if client is not None:
            self._clients.pop(client, None)

    def _say(self, client: str, known: _Client) -> None:
        now = self._clock()
        if now - self._said_at < SAY_EVERY_SECONDS:
            return
        log.warning(
            "authentication throttled: client %s failed %d time(s) and waits %.0f s before "
            "the authenticator is asked again (%d request(s) held back since the last such "
            "line)",
            client,
            known.failures,
            known.wait_until - now,
            self._held,
        )
        self._said_at, self._held = now, 0
