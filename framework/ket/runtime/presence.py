"""The worker's presence in the control database: reported at start, refreshed, removed at exit.

`PresenceService` is a supervised service like the others: each tick it finds the control
database (the registry's once there is one, else the single tenant's), records this worker as
seen there, and reads every worker's row back. When another live worker runs a manifest whose
hash differs from this one's, it logs one WARNING naming both, once per distinct hash, and hands
the rows to its watchers (the tenant share, `ket.runtime.share`). A control database that cannot
be reached only fails the tick (the supervisor logs it, rate limited): jobs go on being claimed
and run, and the watchers keep what they last saw.

    presence = PresenceService(describe=..., locate=..., open_roster=..., interval=10.0)
    presence.watch(share.see)      # called with (this worker, every row) after each report
    await presence.tick()          # what the supervisor calls every `interval` seconds
    await presence.depart()        # stopping: report serving no tenant, so peers take them
    await presence.leave()         # a clean shutdown: the row goes
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable

from ket.store.roster import SHORT_HASH, SeenWorker, WorkerInfo, WorkerRoster

log = logging.getLogger("ket.worker")

# A report every third of a lease (the heartbeat's pace), but at least every REPORT_AT_LEAST
# seconds: a killed worker turns stale after three intervals, and its tenants' new jobs and
# schedule ticks wait for the others to take them, whatever the lease (its running jobs wait
# for their leases anyway). MAX_INTERVAL_SECONDS bounds KET_PRESENCE_INTERVAL_S.
MIN_INTERVAL_SECONDS = 1.0
REPORT_AT_LEAST_SECONDS = 5.0
MAX_INTERVAL_SECONDS = 60.0
LEAVE_TIMEOUT_SECONDS = 5.0

Watcher = Callable[[WorkerInfo, list[SeenWorker]], None]


def presence_interval(lease_ms: int) -> float:
    """How often a worker reports itself: a third of its lease, kept within 1 s and 5 s."""
    return min(max(lease_ms / 3000, MIN_INTERVAL_SECONDS), REPORT_AT_LEAST_SECONDS)


class PresenceService:
    """Keeps this worker's row in the control database and watches the others' manifests."""

    name = "worker presence"

    def __init__(
        self,
        *,
        describe: Callable[[], Awaitable[WorkerInfo]],
        locate: Callable[[], Awaitable[str]],
        open_roster: Callable[[str], WorkerRoster],
        interval: float,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self._describe = describe  # once, at the first tick: it hashes the manifest
        self._locate = locate
        self._open = open_roster
        self.interval = interval
        self.info: WorkerInfo | None = None
        self._url: str | None = None
        self._roster: WorkerRoster | None = None
        self._warned: set[str] = set()  # other manifest hashes already named in a warning
        self._watchers: list[Watcher] = []
        # the supervisor's tick and a first report the tenant share asks for never overlap
        self._ticking = asyncio.Lock()

    def watch(self, watcher: Watcher) -> None:
        """Call `watcher(this worker, every row)` after each report."""
        self._watchers.append(watcher)

    async def tick(self) -> None:
        """Report this worker as seen; warn about a live worker with another manifest; tell
        the watchers."""
        async with self._ticking:
            if self.info is None:
                self.info = await self._describe()
            roster = await self._roster_at(await self._locate())
            seen = await roster.worker_report(self.info)
        self._warn(self.info, seen)
        for watcher in self._watchers:
            watcher(self.info, seen)

    async def depart(self) -> None:
        """Report, within LEAVE_TIMEOUT_SECONDS, that this worker serves no tenant any more: it
        is stopping, and its peers take its tenants at their next report while its running jobs
        finish. The row stays (listed with no tenants) until `leave()`; the watchers hear
        nothing more, so a stopping worker never chooses tenants again."""
        if self.info is None:
            return  # never reported: no peer counts on this worker
        self._watchers.clear()
        self.info = dataclasses.replace(self.info, tenants=())
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_SECONDS):
                await self.tick()
        except Exception as error:
            log.warning(
                "could not tell the other workers that this one is stopping (they take its "
                "tenants once its row goes or turns stale): %s",
                error,
            )

    async def leave(self) -> None:
        """Remove this worker's row (a clean shutdown), within LEAVE_TIMEOUT_SECONDS; a control
        database that does not answer leaves a row that turns stale."""
        roster, self._roster = self._roster, None
        if roster is None or self.info is None:
            return
        try:
            async with asyncio.timeout(LEAVE_TIMEOUT_SECONDS):
                await roster.worker_remove(self.info.id)
        except Exception as error:
            log.warning("could not remove this worker from the control database: %s", error)
        finally:
            with contextlib.suppress(Exception):
                await roster.close()

    async def _roster_at(self, url: str) -> WorkerRoster:
        """The roster of `url`; when the control database moved (a registry was created), the
        row at the old one is removed first, as far as it answers."""
        if self._roster is not None and url == self._url:
            return self._roster
        if self._roster is not None:
            await self.leave()
        self._roster, self._url = self._open(url), url
        return self._roster

    def _warn(self, me: WorkerInfo, seen: list[SeenWorker]) -> None:
        for other in seen:
            theirs = other.info.manifest_hash
            if other.stale or theirs == me.manifest_hash or theirs in self._warned:
                continue
            self._warned.add(theirs)
            log.warning(
                "worker %s on %s runs manifest %s, but this worker (%s) runs manifest %s: the "
                "workers of one deployment should run one manifest (compare with "
                "`ket manifest | sha256sum`, and see `ket workers list`)",
                other.info.id,
                other.info.host,
                theirs[:SHORT_HASH],
                me.id,
                me.manifest_hash[:SHORT_HASH],
            )
