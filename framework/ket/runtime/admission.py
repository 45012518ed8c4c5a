"""How many tenants may hold leases at once: no more than their renewals keep up with.

A tenant with running work renews its leases every third of a lease (runtime/lease.py), on a
connection to its own database. With more tenants than connections, each renewal moves a
connection from one database to another (a close and an open), and a budget of a few
connections moves only so many a second, fewer still on a busy machine: 200 tenants claiming
at once at a budget of 4, beside a busy test suite, were not all renewed in time, and 40
attempts lost their leases (their jobs ran again; issue 26).

So a tenant claims its first job only once it is admitted, and holds its place until its
attempts are over and recorded. How many may hold a place is learnt as a network learns its
window: it starts at the connections the worker's own statements have (`floor`: each such
tenant can keep one, no move needed); while others wait, every tenant that leaves with its
work done makes room for one more (after a halving, for a share of one: one more per round of
places); a renewal that took LATE_SHARE of the time between renewals or longer halves it (once
per interval at most), well before a lease could run out. A tenant
whose work never ends (a backlog) gives its place up after TURN_SECONDS when others wait: its
queues stop claiming, its running work ends, and it queues again at the back. One tenant is
always admitted.

    admission = Admission(floor=budget.lanes)
    await admission.enter()     # the tenant's first claim
    admission.heard(took, every)  # each renewal: how long it took
    admission.leave()           # its attempts are over
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger("ket.worker")

# How long a tenant with work keeps its place while others wait for one.
TURN_SECONDS = 10.0
# A renewal that took this share of the time between renewals is late: the leases it renewed
# had LEASE_SAFETY_MARGIN (runtime/lease.py) and more to spare still, but the tenants holding
# places are more than the connections keep up with.
LATE_SHARE = 0.25
# While tenants wait, the room is looked at again this often (the floor may have grown).
RECHECK_SECONDS = 0.5
SAY_EVERY_SECONDS = 60.0


class Admission:
    """The tenants holding leases on one server's connections, and those waiting to."""

    def __init__(
        self,
        *,
        floor: Callable[[], int] = lambda: 1,
        where: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._floor = floor
        self._where = where  # which server, in the log lines
        self._clock = clock
        self.holding = 0
        # the places learnt so far (they count above the floor), and up to how many they grow
        # by one for each tenant done, not by a share of one: any number until a halving
        self._learnt = 0.0
        self._quick_below = float("inf")
        self._halved_at = -float("inf")
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._recheck: asyncio.TimerHandle | None = None
        self._said_at = -SAY_EVERY_SECONDS
        self._late_said_at = -SAY_EVERY_SECONDS

    @property
    def places(self) -> int:
        """How many tenants may hold leases at once now."""
        return max(1, int(self._learnt), self._floor())

    @property
    def waiting(self) -> int:
        return sum(1 for future in self._waiting if not future.done())

    def turn_over(self, since: float) -> bool:
        """Whether a tenant admitted at `since` (this clock's) should give its place up: others
        wait, and it has had TURN_SECONDS."""
        return bool(self._waiting) and self._clock() - since >= TURN_SECONDS

    async def enter(self) -> None:
        """Once a place is free, take it (at once if one is and no one waits)."""
        if not self._waiting and self.holding < self.places:
            self.holding += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._say_waits()
        self._look_again()
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.leave(done=False)  # admitted as it gave up: the next one takes the place
            elif future in self._waiting:
                self._waiting.remove(future)
            raise

    def leave(self, *, done: bool = True) -> None:
        """A tenant's place is free: its work is `done` (one more place while others wait), or
        it stops."""
        self.holding -= 1
        places = self.places
        if done and self._waiting and self.holding + 1 >= places:
            grown = 1.0 if places < self._quick_below else 1.0 / places
            self._learnt = max(self._learnt, places) + grown
        self._admit()

    def heard(self, took: float, every: float) -> None:
        """A tenant's renewal took `took` seconds, of the `every` between renewals: when late,
        half as many places (once per `every` at most)."""
        if took < every * LATE_SHARE:
            return
        now = self._clock()
        if now - self._halved_at < every:
            return
        self._halved_at = now
        self._learnt = self._quick_below = max(1.0, self.holding / 2)
        if now - self._late_said_at >= SAY_EVERY_SECONDS:
            self._late_said_at = now
            log.warning(
                "renewing leases took %.1f s of the %.1f s between renewals, with %d tenant(s) "
                "holding running work on the connection budget%s: admitting %d at once until "
                "renewals are prompt again",
                took,
                every,
                self.holding,
                self._where,
                self.places,
            )

    def _admit(self) -> None:
        while self._waiting and self.holding < self.places:
            future = self._waiting.popleft()
            if not future.done():
                self.holding += 1
                future.set_result(None)

    def _look_again(self) -> None:
        """While tenants wait, look at the room again every RECHECK_SECONDS."""
        if self._recheck is None and self._waiting:
            loop = asyncio.get_running_loop()
            self._recheck = loop.call_later(RECHECK_SECONDS, self._rechecked)

    def _rechecked(self) -> None:
        self._recheck = None
        self._admit()
        self._look_again()

    def _say_waits(self) -> None:
        now = self._clock()
        if now - self._said_at < SAY_EVERY_SECONDS:
            return
        self._said_at = now
        log.warning(
            "%d tenant(s) hold running work, as many as the connection budget%s renews the leases "
            "of in time; %d more wait their turn to claim. Work waits, it does not fail; raise "
            "--max-connections, or make connections cheaper to open (a pooler, a nearer "
            "server), if this lasts",
            self.holding,
            self._where,
            self.waiting,
        )
