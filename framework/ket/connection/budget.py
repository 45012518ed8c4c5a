"""One connection budget per process and PostgreSQL server: at most `limit` connections open at
once to a server, over every database the process reaches there (each tenant's lane and engine,
the listener, the roster). A server's max_connections is its own, so tenants on two servers get
the budget on each (`install_per_server`, what `ket worker` does); a test may give every server
one budget (`install`).

    install_per_server(20)                   # the process's budgets: every store opened after
    raw = await connect(open_one, kind="lane", url=url)   # waits while 20 are open on url's
                                                          # server; never fails

A connection counts from the moment it is asked for until it is closed (or collected): the
budget keeps the live ones in a weak set and asks each whether it is closed, so no path that
closes a connection (SQLAlchemy's pool, a broken socket, a lane's reaper) can leak a permit.

When the budget is spent, a caller first takes a connection that sits idle elsewhere: the
holder idle longest (a tenant's lane, an engine's pool) closes it, once it has sat idle for
KEEP_FOR_OWNER_SECONDS. Holders say when a connection
goes idle (`released(holder)`), so the budget looks only at those, never at every tenant's. With
none idle, the caller waits, for as long as it takes: work waits for a connection, it never fails
for want of one. Nor does its timeout run out meanwhile: the wait pauses the attempt clock of
the job it waits for (store/waiting.py).
The wait is said once a minute at most, with the numbers. Idle connections close by themselves
after `idle_seconds`, so an idle tenant holds none.

Statements that keep leases (heartbeats, settlements) are `urgent()`: when callers wait, they go
first, so that a herd of schedule sweeps or claims cannot hold them back until leases expire.
A claim for a job someone else just enqueued (a hint from the application) waits with a
PROMPT `Ticket` (`waiting_as`), or is `promote`d to one when the hint comes while it waits: it
goes after the urgent ones, but before the work that has waited less than PROMPT_AHEAD_SECONDS.
After a tick a hundred tenants' sweeps and the claims of their tick jobs each want a connection
at once; the job an application enqueued into one tenant meanwhile would otherwise wait behind
them all, for a second or more.

Connections held across a handler's own code (an engine's: `ctx.db`, `ctx.tx`) may take at most
`limit - RESERVED` of the budget, less the connections that are neither an engine's nor the
worker's statements (the listener, the hint sender, a registry read): the worker's own statements
(claims, settlements, heartbeats, which never wait on anything while they hold one) always find
room, so a fleet of handlers each holding a transaction cannot starve the heartbeats that keep
their leases.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from ket import process
from ket.connection.address import server_of
from ket.errors import StoreError
from ket.store.waiting import PausableClock, pause_attempt

if TYPE_CHECKING:
    from ket.connection.url import UrlLike

log = logging.getLogger("ket.store.budget")
C = TypeVar("C")

Kind = Literal["lane", "engine", "listener", "other"]
# set on a connection closed by goodbye.close_quietly until its server process is gone: it
# counts until then, so the server never sees one more than the budget
LEAVING = "_ket_leaving"
DEFAULT_LIMIT = 20
DEFAULT_IDLE_SECONDS = 10.0
# of the budget, what only the worker's own short statements may take (see the module's text)
RESERVED = 2
# while callers wait, the first looks again this often (a close the budget was not told of)
RECHECK_SECONDS = 0.5
# A connection that went idle is kept this long for its own holder's next statement (the claim
# after a sweep fired a tick, the settlement after a job) before a waiter may close it for room:
# with a thousand tenants, taking it at once would make every step of a job open a connection.
# Short, because while the budget is spent it bounds how fast connections turn over: 0.1 s
# capped a worker of 20 connections at about 120 a second, fewer than a thousand tenants' ticks
# needed (bench/README.md). The holder's statements that come while its connection is still
# busy wait for it (ket.store.sql.lane), so they need no keep.
KEEP_FOR_OWNER_SECONDS = 0.02
SAY_EVERY_SECONDS = 60.0  # the longest silence between two "budget spent" lines
# How long the caller served next may wait for room before a holder whose connection comes
# back gives it up instead of keeping it for its own next statement (`owed`). Without it, a
# tenant whose calls never stop keeps its connections busy for good: `ket serve` with 19
# tenants called 15 at a time each answered a call of a twentieth in 15 s (p99).
FAIR_WAIT_SECONDS = 0.1
# A prompt wait goes before the others, but for those that waited this long already: a steady
# stream of application hints cannot hold sweeps and ticks back for longer.
PROMPT_AHEAD_SECONDS = 5.0
# While the server refuses more, one more is tried after a pause that doubles from
# CEILING_FIRST_RETRY_SECONDS up to CEILING_RETRY_SECONDS, and each one it takes lets another be
# tried at once: work resumes within about a second of the server having room again. (One more
# every 30 s left a worker squeezed down to its LISTEN by another client idle for 30 s after
# that client let go, and took 32 s to run 30 small jobs: issue 26.)
CEILING_RETRY_SECONDS = 1.0
CEILING_FIRST_RETRY_SECONDS = 0.05
MIN_LIMIT = RESERVED + 1


# a waiter: its kind, the future that wakes it to look again, its ticket, when it began to
# wait, and how many connections its holder has already (0: a tenant with none)
_Entry = tuple[Kind, "asyncio.Future[None]", "Ticket", float, int]


class Holder(Protocol):
    """Something that keeps idle connections: a lane, an engine's pool."""

    def idle_since(self) -> float | None:
        """The monotonic time its oldest idle connection went idle; None with none idle."""
        ...

    async def shed(self, older_than: float | None = None) -> int:
        """Close idle connections (all idle before `older_than`, else the oldest one); how
        many it closed."""
        ...


class ConnectionBudget:
    """At most `limit` open connections in this process; see the module's text."""

    def __init__(
        self,
        limit: int,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        server: str = "",
        fair: bool = False,
    ) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < MIN_LIMIT:
            raise StoreError(
                f"the connection budget must be a whole number of at least {MIN_LIMIT}, "
                f"got {limit!r}"
            )
        if not idle_seconds > 0:
            raise StoreError(f"idle_seconds must be above 0, got {idle_seconds!r}")
        self.limit = limit
        self.idle_seconds = idle_seconds
        self.server = server  # host:port, when the process has a budget per server
        # fair between holders (`ket serve`: see `owed` and `_enqueue`); a worker's fleet
        # shares its tenants' turns itself, and its leases want its connections kept
        self.fair = fair
        self._live: dict[Kind, weakref.WeakSet[Any]] = {
            "lane": weakref.WeakSet(),
            "engine": weakref.WeakSet(),
            "listener": weakref.WeakSet(),
            "other": weakref.WeakSet(),
        }
        self._opening: dict[Kind, int] = dict.fromkeys(self._live, 0)
        # connections being shed for room: closed on our side, still counted until the server
        # process hangs up (the holder's shed returns then), and the holders shedding them
        self._draining = 0
        self._shedding: set[int] = set()
        # the holders that said a connection of theirs went idle (some may have taken it back
        # since): at most about `limit` of them, however many tenants the process serves
        self._idle: dict[int, weakref.ref[Any]] = {}
        # (kind, woken when it may look again, its ticket, when it began to wait), in order
        self._waiters: deque[_Entry] = deque()
        self._said_at = -SAY_EVERY_SECONDS
        self._refusal_said_at = -SAY_EVERY_SECONDS
        self._unsaid = 0  # waits since the last line
        self._reaper: asyncio.TimerHandle | None = None
        self._recheck: asyncio.TimerHandle | None = None
        self._recheck_at = 0.0
        self._reaping: set[asyncio.Task[None]] = set()
        self.peak = 0  # the most ever open at once
        # below the limit while the server refuses more (see `connect`); when one more may be
        # tried; the refusals in a row, and those not said yet
        self._ceiling = limit
        self._retry_at = 0.0
        self._refusals = 0
        self._unsaid_refusals = 0
        self._refusal_said = False  # a refusal was logged, and no recovery since

    # -- counting ---------------------------------------------------------------------------

    def open_count(self, kind: Kind | None = None) -> int:
        """Connections open or being opened now (of `kind`, else of every kind)."""
        kinds = [kind] if kind is not None else list(self._live)
        draining = self._draining if kind is None else 0
        return draining + sum(
            self._opening[k] + sum(1 for c in self._live[k] if not _closed(c)) for k in kinds
        )

    def owed(self) -> bool:
        """Whether the caller the budget serves next, urgent, prompt or for a holder with no
        connection yet, has waited FAIR_WAIT_SECONDS or more: a holder whose connection comes
        back then gives it up rather than keep it for its own next statement, so busy tenants
        cannot keep the room from another for long. Only for a fair budget (`ket serve`'s)."""
        if not self.fair:
            return False
        for kind, waiter, ticket, since, holding in self._waiters:
            if waiter.done():
                continue
            if kind == "engine" and self.open_count("engine") >= self.engine_share():
                return False  # it waits for an engine's share, which a lane's cannot give
            if ticket.tier == NORMAL and holding:
                return False  # one more for a holder that has some: it waits its turn
            return time.monotonic() - since >= FAIR_WAIT_SECONDS
        return False

    def spent(self) -> bool:
        """Whether one more connection would have to wait, or to close an idle one."""
        return bool(self._waiters) or self.open_count() >= self.ceiling()

    def released(self, holder: Holder | None = None) -> None:
        """A connection closed, or went idle in `holder` (which the budget may then ask to
        close it): the first waiter that may take the room looks again (an engine's waits while
        engines hold their share, so a lane's behind it goes first)."""
        if holder is not None:  # waiters may take it once its owner had a moment to reuse it
            self._idle[id(holder)] = weakref.ref(holder)
            if self._waiters:
                self._look_again_in(KEEP_FOR_OWNER_SECONDS)
            return
        engines_full: bool | None = None
        for index, (kind, waiter, _, _, _) in enumerate(self._waiters):
            if waiter.done():
                continue
            if kind == "engine":
                # at their share, engines wait for one of theirs to go idle (they may shed it):
                # woken only for room they could never take, they waited for good
                if engines_full is None:
                    engines_full = (
                        self.open_count("engine") >= self.engine_share() and not self._idle_engine()
                    )
                if engines_full:
                    continue
            del self._waiters[index]
            waiter.set_result(None)
            return

    # -- taking one -------------------------------------------------------------------------

    async def connect(
        self, open_one: Callable[[], Awaitable[C]], *, kind: Kind, holding: int = 0
    ) -> C:
        """`open_one()` once the budget has room for it; waits (never fails) while it has none.
        `holding`: how many connections the caller's holder has open already (a holder with
        none waits ahead of the normal ones that have some).

        A server that refuses the connection for want of room (its `max_connections`, or the
        role's `CONNECTION LIMIT`, below this budget) is taken as the budget's real size for
        now: the caller waits, as for a spent budget, and the budget tries one more after a
        short pause (see CEILING_RETRY_SECONDS), and another at once each time the server takes
        one. So does a refusal while this process holds none: another client may let go at any
        moment, and a caller that failed would only be retried later, or logged per tenant.
        Other errors of `open_one` reach the caller."""
        while True:
            await self._room(kind, holding)
            self._opening[kind] += 1
            try:
                connection = await open_one()
            except Exception as error:
                self._opening[kind] -= 1
                self.released()
                if not no_room(error):
                    raise
                self._refused(error)
                continue
            except BaseException:
                self._opening[kind] -= 1
                self.released()
                raise
            break
        self._opening[kind] -= 1
        self._live[kind].add(connection)
        self.peak = max(self.peak, self.open_count())
        self._start_reaper()
        if self._ceiling < self.limit:
            self._taken()
        return connection

    @asynccontextmanager
    async def held(self, kind: Kind = "other") -> AsyncIterator[None]:
        """Room for one connection for the block, which opens and closes it itself (a call
        made in a thread, such as reading the tenant registry)."""
        await self._room(kind)
        self._opening[kind] += 1
        self._start_reaper()
        try:
            yield
        except Exception as error:
            if no_room(error):  # the server refused the block's connection: counted, said
                self._refused(error)
            raise
        finally:
            self._opening[kind] -= 1
            self.released()

    def _refused(self, error: Exception) -> None:
        """The server had no room: work within what is open now, try one more after a pause
        (doubling, up to CEILING_RETRY_SECONDS), and say so once a minute with the count."""
        now = time.monotonic()
        self._refusals += 1
        self._unsaid_refusals += 1
        self._ceiling = self.open_count()  # none at all, when none is open: try again later
        pause = CEILING_FIRST_RETRY_SECONDS * 2.0 ** min(self._refusals - 1, 16)
        pause = min(pause, CEILING_RETRY_SECONDS)
        self._retry_at = now + pause
        self._look_again_in(pause)  # the first waiter tries then, whoever else comes
        if now - self._refusal_said_at < SAY_EVERY_SECONDS:
            return
        log.warning(
            "PostgreSQL%s refused a connection for want of room (%s) while this process holds "
            "%d (%d refusal(s) since the last such line): working within %d until it takes more "
            "(tried again within %g s). Work waits, it does not fail; lower --max-connections "
            "(now %d) to what the server allows",
            self._on(),
            _last_line(error),
            self.open_count(),
            self._unsaid_refusals,
            self._ceiling,
            CEILING_RETRY_SECONDS,
            self.limit,
        )
        self._refusal_said_at, self._unsaid_refusals = now, 0
        self._refusal_said = True

    def _taken(self) -> None:
        """The server took a connection while the budget worked below its limit: it has room
        again, perhaps for more; let the next waiter try one more at once."""
        self._refusals = 0
        self._ceiling = min(self.limit, max(self._ceiling, self.open_count()) + 1)
        if self._ceiling >= self.limit and self._refusal_said:  # one line for each warning
            self._refusal_said = False
            log.info(
                "PostgreSQL%s takes connections again: working within %d", self._on(), self.limit
            )
        self.released()

    def ceiling(self) -> int:
        """How many may be open now: the limit, or less while the server refuses more."""
        if self._ceiling < self.limit and time.monotonic() >= self._retry_at:
            # time to try one more: room for one above what is open now, until the server
            # answers (`_taken` raises it further, `_refused` lowers it and sets the next try)
            self._ceiling = min(self.limit, max(self._ceiling, self.open_count() + 1))
            self._retry_at = float("inf")
        return self._ceiling

    def engine_share(self) -> int:
        """How many connections engines may hold now: what leaves RESERVED of the ceiling to
        the worker's own statements, beside the connections that are neither theirs nor an
        engine's (the LISTEN connection, the one that sends wake-up hints, a registry read);
        at least one."""
        # Counting only the engines against `ceiling - RESERVED` left the reserve to the
        # listener and the hint connection: at --max-connections 4 two handlers in ctx.tx took
        # the last two, heartbeats found none for their whole transaction, and the attempts
        # were aborted with their leases lost.
        others = self.open_count("listener") + self.open_count("other")
        return max(1, self.ceiling() - RESERVED - others)

    async def _room(self, kind: Kind, holding: int = 0) -> None:
        waited_since: float | None = None
        paused: PausableClock | None = None  # the caller's attempt clock, stopped while it waits
        woken = False
        try:
            while True:
                ceiling = self.ceiling()
                cap = self.engine_share() if kind == "engine" else ceiling
                total = self.open_count()
                fits = total < ceiling and (kind != "engine" or self.open_count("engine") < cap)
                if fits:
                    if waited_since is not None:
                        self._waited(time.monotonic() - waited_since)
                    return
                closed, ripe_in = await self._shed_one(kind)
                if closed:
                    continue
                if waited_since is None:
                    waited_since = time.monotonic()
                    paused = pause_attempt()
                    self._say_spent(kind)
                waiter = asyncio.get_running_loop().create_future()
                entry = (kind, waiter, _TICKET.get() or Ticket(NORMAL), waited_since, holding)
                self._enqueue(entry, woken)
                self._look_again_in(RECHECK_SECONDS if ripe_in is None else ripe_in)
                try:
                    await waiter  # woken: it looks again above, and waits anew if it finds no room
                    woken = True
                except BaseException:
                    if entry in self._waiters:
                        self._waiters.remove(entry)
                    elif waiter.done() and not waiter.cancelled():
                        self.released()  # woken as it gave up: the next one looks instead
                    raise
        finally:
            if paused is not None:
                paused.resume()

    def _enqueue(self, entry: _Entry, woken: bool) -> None:
        """Queue a waiter by its ticket: urgent ones first; then the prompt ones, and the others
        that waited PROMPT_AHEAD_SECONDS; then the rest in turn, those of a holder with no
        connection yet before those of a holder that has some. One woken that found no room
        goes first of its kind (it keeps its turn)."""
        tier = entry[2].tier
        if tier == URGENT:
            self._waiters.appendleft(entry)
            return
        if tier == NORMAL and not woken:
            if self.fair and not entry[4]:  # a holder with none before more for those with some
                for index, (_, _, ticket, _, held) in enumerate(self._waiters):
                    if ticket.tier == NORMAL and held:
                        self._waiters.insert(index, entry)
                        return
            self._waiters.append(entry)
            return
        aged = time.monotonic() - PROMPT_AHEAD_SECONDS
        index = 0
        for _, _, ticket, since, _ in self._waiters:
            other = ticket.tier
            if other == NORMAL and (tier == NORMAL or since > aged):
                break
            if other == PROMPT and tier == PROMPT and woken:
                break
            index += 1
        self._waiters.insert(index, entry)

    def promote(self, ticket: Ticket) -> None:
        """The wait of `ticket` became prompt while it waited (the application enqueued a job
        for the claim that waits): it moves up as if it had begun so."""
        if ticket.tier != NORMAL:
            return
        ticket.tier = PROMPT
        for entry in self._waiters:
            if entry[2] is ticket:
                self._waiters.remove(entry)
                self._enqueue(entry, woken=False)
                return

    def _look_again_in(self, seconds: float) -> None:
        """Have the first waiter look again within `seconds` (one timer, however many wait)."""
        loop = asyncio.get_running_loop()
        at = loop.time() + seconds
        if self._recheck is not None:
            if self._recheck_at <= at:
                return
            self._recheck.cancel()
        self._recheck, self._recheck_at = loop.call_at(at, self._look_again), at

    def _look_again(self) -> None:
        """While callers wait, the first one looks again at least every RECHECK_SECONDS (a
        connection may have closed without the budget being told), and when an idle one may
        be taken."""
        self._recheck = None
        if self._waiters:
            self.released()
            if self._waiters:
                self._look_again_in(RECHECK_SECONDS)

    async def _shed_one(self, kind: Kind) -> tuple[bool, float | None]:
        """Close the connection idle longest anywhere (an engine's, for an engine that is at
        its cap), if it sat idle for KEEP_FOR_OWNER_SECONDS; whether one closed, and if not,
        in how long one idle now may be taken (None: none is idle).

        A shed lasts until the server process has hung up, so the next waiter is woken as
        this one starts: it sheds another holder's connection meanwhile. After a tick a
        hundred tenants may each want a connection at once, and one shed at a time would
        serve them at the pace of the server's goodbyes."""
        holders = [h for h in self._idle_holders() if id(h) not in self._shedding]
        if kind == "engine" and self.open_count("engine") >= self.engine_share():
            holders = [h for h in holders if getattr(h, "kind", None) == "engine"]
        if not holders:
            return False, None
        ripe = time.monotonic() - KEEP_FOR_OWNER_SECONDS
        aged = sorted(((h.idle_since() or 0.0, h) for h in holders), key=lambda pair: pair[0])
        for since, holder in aged:
            if since > ripe:
                return False, since - ripe
            self._shedding.add(id(holder))
            self._draining += 1
            self.released()  # the next waiter looks too, for another idle connection
            try:
                if await holder.shed():
                    return True, None
            finally:
                self._shedding.discard(id(holder))
                self._draining -= 1
        return False, None

    def _on(self) -> str:
        """Which server, in a log line, when the process has a budget per server."""
        return f" on {self.server}" if self.server else ""

    def _say_spent(self, kind: Kind) -> None:
        now = time.monotonic()
        self._unsaid += 1
        if now - self._said_at < SAY_EVERY_SECONDS:
            return
        counts = ", ".join(f"{k} {self.open_count(k)}" for k in self._live if self.open_count(k))
        since = f" ({self._unsaid - 1} more wait(s) since the last such line)"
        log.warning(
            "connection budget%s spent: %d of %d connections open (%s); %s work waits for "
            "one%s. Work waits, it does not fail; raise --max-connections (KET_MAX_CONNECTIONS) "
            "or lower the concurrency if this lasts",
            self._on(),
            self.open_count(),
            self.limit,
            counts or "none",
            kind,
            since if self._unsaid > 1 else "",
        )
        self._said_at = now
        self._unsaid = 0

    def _waited(self, seconds: float) -> None:
        if seconds >= 1.0:
            log.debug("waited %.1f s for a connection within the budget", seconds)

    # -- idle connections close by themselves -----------------------------------------------

    def _start_reaper(self) -> None:
        if self._reaper is None:
            loop = asyncio.get_running_loop()
            self._reaper = loop.call_later(self.idle_seconds / 2, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        task = asyncio.ensure_future(self._reap_idle())
        self._reaping.add(task)
        task.add_done_callback(self._reaped)

    def _idle_engine(self) -> bool:
        """Whether an engine's pool holds an idle connection that no one is shedding yet."""
        return any(
            getattr(holder, "kind", None) == "engine" and id(holder) not in self._shedding
            for holder in self._idle_holders()
        )

    def _idle_holders(self) -> list[Holder]:
        """The holders with an idle connection now (forgetting those without one)."""
        found: list[Holder] = []
        for key, ref in list(self._idle.items()):
            holder = ref()
            if holder is None or holder.idle_since() is None:
                del self._idle[key]
            else:
                found.append(holder)
        return found

    async def _reap_idle(self) -> None:
        before = time.monotonic() - self.idle_seconds
        for holder in self._idle_holders():
            since = holder.idle_since()
            if since is not None and since <= before:
                self._draining += 1  # counted until its server process is gone, as a shed is
                try:
                    await holder.shed(older_than=before)
                finally:
                    self._draining -= 1

    def _reaped(self, task: asyncio.Task[None]) -> None:
        self._reaping.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            # never silent, never the end of reaping: say it (rate-limited) and go on
            now = time.monotonic()
            if now - self._said_at >= SAY_EVERY_SECONDS:
                self._said_at = now
                log.error("closing idle connections failed: %r; trying again later", error)
        if self.open_count() or self._idle:
            self._start_reaper()


# what PostgreSQL says when it has no room for another connection (the server's message text:
# libpq gives a failed connection no SQLSTATE; 53300 too_many_connections)
_NO_ROOM = (
    "too many clients already",
    "too many connections for role",
    "too many connections for database",
    "remaining connection slots are reserved",
)


def no_room(error: BaseException) -> bool:
    """Whether `error` is the server refusing a connection for want of room."""
    text = str(error)
    return any(words in text for words in _NO_ROOM)


def _last_line(error: Exception) -> str:
    """The last line of the error's text: for a refused connection, the server's FATAL line."""
    text = str(error).strip().splitlines()
    return text[-1].strip() if text else type(error).__name__


def _closed(connection: Any) -> bool:
    """Whether `connection` no longer counts: closed, and its server process gone (a connection
    closed by goodbye.close_quietly counts until then)."""
    if getattr(connection, LEAVING, False):
        return False
    closed = getattr(connection, "closed", False)
    return bool(closed)


class Installed:
    """The process's connection budgets (a part of the process: ket.process): one per PostgreSQL
    server, each of `limit` connections (`install_per_server`, what `ket worker` does), or one
    shared by every server (`install`, for tests); none: no budget, as in an application's own
    process, whose connections its pools bound."""

    def __init__(self) -> None:
        self.shared: ConnectionBudget | None = None
        self.limit: int | None = None
        self.fair = False
        self.idle_seconds = DEFAULT_IDLE_SECONDS
        self.by_server: dict[str, ConnectionBudget] = {}

    def of(self, url: UrlLike) -> ConnectionBudget | None:
        """The budget of the server `url` reaches (made on first use), if there is one."""
        if self.shared is not None or self.limit is None:
            return self.shared
        server = server_of(url)
        if server is None:  # SQLite: no connection to count
            return None
        found = self.by_server.get(server)
        if found is None:
            found = ConnectionBudget(
                self.limit, idle_seconds=self.idle_seconds, server=server, fair=self.fair
            )
            self.by_server[server] = found
        return found

    def every(self) -> list[ConnectionBudget]:
        return [self.shared] if self.shared is not None else list(self.by_server.values())


URGENT, PROMPT, NORMAL = 0, 1, 2  # the tiers of waiters, first served first


class Ticket:
    """The tier of the waits for room within a block (`waiting_as`); a normal one may become
    prompt while it waits (`ConnectionBudget.promote`)."""

    __slots__ = ("tier",)

    def __init__(self, tier: int) -> None:
        self.tier = tier


_TICKET: ContextVar[Ticket | None] = ContextVar("ket_budget_ticket", default=None)


@contextmanager
def waiting_as(ticket: Ticket) -> Iterator[Ticket]:
    """Within the block, waits for room go in the tier of `ticket`."""
    token = _TICKET.set(ticket)
    try:
        yield ticket
    finally:
        _TICKET.reset(token)


def urgent() -> AbstractContextManager[Ticket]:
    """Within the block, a wait for room goes before the others (see the module's text)."""
    return waiting_as(Ticket(URGENT))


def promote(ticket: Ticket, url: UrlLike) -> None:
    """Make the wait of `ticket` prompt (see the module's text), in the budget of `url`'s
    server."""
    spent = current(url)
    if spent is not None:
        spent.promote(ticket)
    else:
        ticket.tier = PROMPT


def install(budget: ConnectionBudget | None) -> None:
    """Make `budget` the process's, shared by every server (None: no budget, as for an
    application's own process)."""
    installed = process.current().part(Installed)
    installed.shared, installed.limit, installed.by_server = budget, None, {}


def install_per_server(
    limit: int, *, idle_seconds: float = DEFAULT_IDLE_SECONDS, fair: bool = False
) -> None:
    """Give the process a budget of `limit` connections on each PostgreSQL server it reaches
    (what `ket worker --max-connections` states: a server's max_connections is its own);
    `fair` between its holders, as `ket serve` wants (see ConnectionBudget.owed)."""
    ConnectionBudget(limit, idle_seconds=idle_seconds)  # the same refusal of a bad limit, now
    installed = process.current().part(Installed)
    installed.shared, installed.by_server = None, {}
    installed.limit, installed.idle_seconds, installed.fair = limit, idle_seconds, fair


def current(url: UrlLike) -> ConnectionBudget | None:
    """The budget of the server `url` reaches, if `ket worker` (or a test) installed one."""
    return process.current().part(Installed).of(url)


def every() -> list[ConnectionBudget]:
    """The process's budgets so far: one per server it reached (or the shared one)."""
    return process.current().part(Installed).every()


@asynccontextmanager
async def held(url: UrlLike, kind: Kind = "other") -> AsyncIterator[None]:
    """Room for one connection to `url`'s server for the block, within its budget if there is
    one."""
    budget = current(url)
    if budget is None:
        yield
        return
    async with budget.held(kind):
        yield


async def connect(open_one: Callable[[], Awaitable[C]], *, kind: Kind, url: UrlLike) -> C:
    """`open_one()` (a connection to `url`'s server) within that server's budget, if there is
    one."""
    budget = current(url)
    if budget is None:
        return await open_one()
    return await budget.connect(open_one, kind=kind)
