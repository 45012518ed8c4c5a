"""This worker's share of the tenants: membership from the presence reports, ownership by
rendezvous hashing (`ket.runtime.ownership`).

The presence service hands every report's rows to `see()`; the fleet asks `mine()` which of the
registered tenants to serve, and waits on `changed()` to refresh as soon as the peers differ from
those its tenants were chosen with. A lone tenant needs no roster: every worker owns it. With more,
the first call reads the roster (one presence report) before any tenant is connected to, so a
worker never opens every tenant only to drop most of them a moment later. When a report fails the
peers stay as last seen: the worker keeps its tenants rather than dropping them, or taking all;
and once it reads the roster again, a peer that looks stale only because it could not report
while this worker could not read either gets time to report before its tenants are taken.

    share = TenantShare(read=presence.tick)
    presence.watch(share.see)
    urls = {name: url for name, url in urls.items() if name in await share.mine(urls)}
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection

from ket.errors import StoreError
from ket.runtime.ownership import owned, peers_of, same_group
from ket.store.roster import STALE_INTERVALS, SeenWorker, WorkerInfo

log = logging.getLogger("ket.worker")

# Reports this many of its intervals apart mean this worker could not read the roster in between
# (its reports failed, or hung): it did not see its peers' reports then either.
BLIND_AFTER_INTERVALS = 2.0


class TenantShare:
    """The peers this worker shares its tenants with, and the tenants that are its own."""

    def __init__(
        self, *, read: Callable[[], Awaitable[None]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._read = read  # one presence report, which calls see()
        self._clock = clock
        self._seen_at: float | None = None  # when the last report's rows came
        self._grace: dict[str, float] = {}  # peer -> until when it counts as live (see see())
        self._me: str | None = None
        self._peers: frozenset[str] | None = None  # None until the first report
        self._used: frozenset[str] | None = None  # the peers the last mine() chose with
        self._changed = asyncio.Event()
        self._said: tuple[frozenset[str], int, int] | None = None

    @property
    def peers(self) -> frozenset[str] | None:
        """The ids of the live peers (this worker's own included); None before the first
        report."""
        return self._peers

    def see(self, me: WorkerInfo, seen: list[SeenWorker]) -> None:
        """A presence report: `me` as reported, `seen` every row of the roster."""
        self._me = me.id
        now = self._clock()
        live = peers_of(me, seen)
        blind_for = 0.0 if self._seen_at is None else now - self._seen_at
        if blind_for > BLIND_AFTER_INTERVALS * me.interval_seconds and self._peers is not None:
            self._excuse(me, seen, live, blind_for, now)
        rows = {worker.info.id for worker in seen}
        self._grace = {
            peer: until
            for peer, until in self._grace.items()
            if until > now and peer in rows and peer not in live
        }
        self._seen_at = now
        self._peers = live | self._grace.keys()
        if self._peers != self._used:
            self._changed.set()

    def _excuse(
        self,
        me: WorkerInfo,
        seen: list[SeenWorker],
        live: frozenset[str],
        blind_for: float,
        now: float,
    ) -> None:
        """This worker could not read the roster for `blind_for` seconds (the control database
        was away, most likely for its peers too): a peer that was live before and looks stale
        now may only have failed to report for the same reason. It stays a peer until it has had
        as long since this report as a live peer has before it turns stale; if it reports by
        then, nothing moved. Without this, the first worker to report after an outage took every
        tenant, its peers for dead (issue 26)."""
        assert self._peers is not None
        excused = []
        for worker in seen:
            peer = worker.info.id
            was_live = peer in self._peers and peer not in live and peer not in self._grace
            # stale, and of the group: not a peer that said it departs (it serves no tenant)
            if was_live and worker.stale and same_group(me, worker.info):
                self._grace[peer] = now + STALE_INTERVALS * worker.info.interval_seconds
                excused.append(peer)
        if excused:
            log.info(
                "this worker could not read the worker roster for %.1f s: %s, whose reports "
                "look stale since, keep their tenants while they have time to report again",
                blind_for,
                ", ".join(sorted(excused)),
            )

    async def mine(self, tenants: Collection[str]) -> frozenset[str]:
        """The tenants of `tenants` this worker serves; reads the roster first if it never has
        (StoreError when that fails: the caller keeps the tenants it has)."""
        if len(tenants) <= 1:
            self._used = self._peers  # chosen: the peers seen so far make no difference
            return frozenset(tenants)  # every worker owns a lone tenant: no roster needed
        if self._peers is None:
            await self._read()
        if self._me is None or self._peers is None:
            raise StoreError("the worker roster was not read, so this worker's tenants are unknown")
        self._used = self._peers
        chosen = owned(self._me, tenants, self._peers)
        self._say(chosen, len(tenants), len(self._peers))
        return chosen

    async def changed(self) -> None:
        """Return once the peers differ from those the last `mine()` chose with (at once if
        they do now: a refresh that failed is tried again)."""
        while self._peers == self._used:
            await self._changed.wait()
            self._changed.clear()

    def _say(self, chosen: frozenset[str], tenants: int, peers: int) -> None:
        said = (chosen, tenants, peers)
        if said == self._said:
            return
        self._said = said
        log.info(
            "this worker serves %d of %d tenants, shared among %d worker%s",
            len(chosen),
            tenants,
            peers,
            "" if peers == 1 else "s",
        )
