"""This worker's share of the tenants: membership from the presence reports, ownership by
rendezvous hashing (`ket.runtime.ownership`).

The presence service hands every report's rows to `see()`; the fleet asks `mine()` which of the
registered tenants to serve, and waits on `changed()` to refresh as soon as the peers differ from
those its tenants were chosen with. A lone tenant needs no roster: every worker owns it. With more,
the first call reads the roster (one presence report) before any tenant is connected to, so a
worker never opens every tenant only to drop most of them a moment later. When a report fails the
peers stay as last seen: the worker keeps its tenants rather than dropping them, or taking all.

    share = TenantShare(read=presence.tick)
    presence.watch(share.see)
    urls = {name: url for name, url in urls.items() if name in await share.mine(urls)}
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from ket.errors import StoreError
from ket.runtime.ownership import owned, peers_of
from ket.store.roster import SeenWorker, WorkerInfo

log = logging.getLogger("ket.worker")


class TenantShare:
    """The peers this worker shares its tenants with, and the tenants that are its own."""

    def __init__(self, *, read: Callable[[], Awaitable[None]]) -> None:
        self._read = read  # one presence report, which calls see()
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
        self._peers = peers_of(me, seen)
        if self._peers != self._used:
            self._changed.set()

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
