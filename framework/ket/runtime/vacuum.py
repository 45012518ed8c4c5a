"""The vacuumer: the jobs table's dead row versions are reclaimed while work flows through it.

Each job this worker claims leaves dead row versions behind (the claim's and the settlement's),
which slow every later claim until the table is vacuumed (see `ket.store.sql.vacuum`). After
every `every` claims here the vacuumer asks the store, which vacuums when the table holds enough
dead rows, whoever made them: so an idle tenant costs nothing, and several workers on one
database share the work (one vacuum runs at a time; the others skip it).
"""

from __future__ import annotations

import logging

from ket.runtime.lease import Attempts
from ket.store.contract import VacuumStore
from ket.store.types import Vacuum

log = logging.getLogger("ket.worker")

CHECK_EVERY_CLAIMS = 1_000
# A vacuum when dead row versions reach 1,000 + 5 % of the live rows (a job leaves two): about
# every 25,000 jobs in a table of a million rows; autovacuum's default is 50 + 20 %.
VACUUM = Vacuum(threshold=1_000, scale_factor=0.05)
# How far the checks may be spread out while vacuums reclaim little (see tick).
MAX_SPREAD = 64


class VacuumService:
    """Asks the store to vacuum the jobs table after every `every` claims in this worker."""

    name = "vacuum"

    def __init__(
        self,
        store: VacuumStore,
        attempts: Attempts,
        *,
        tenant: str,
        every: int = CHECK_EVERY_CLAIMS,
        vacuum: Vacuum = VACUUM,
        interval: float = 1.0,
    ) -> None:
        if every < 1:
            raise ValueError(f"every must be at least 1 claim, got {every}")
        self._store = store
        self._attempts = attempts
        self._tenant = tenant
        self._base = self._every = every
        self._vacuum = vacuum
        self._checked_at = 0  # attempts.started at the last check
        self._given_up = False
        self.interval = interval

    async def tick(self) -> None:
        started = self._attempts.started
        if self._given_up or started - self._checked_at < self._every:
            return
        self._checked_at = started
        result = await self._store.job_vacuum(self._vacuum)
        if result.outcome == "not_needed":
            self._given_up = True
        elif result.outcome == "not_permitted":
            self._given_up = True
            log.info(
                "tenant %s: this worker's database role owns neither the jobs table nor the "
                "database, so it cannot vacuum ket_jobs; autovacuum alone reclaims its dead rows, "
                "and claims slow down while a large backlog drains (see docs/operations.md, "
                "Dead rows)",
                self._tenant,
            )
        elif result.outcome == "vacuumed":
            log.debug(
                "tenant %s: vacuumed ket_jobs: %d dead row versions, %d left",
                self._tenant,
                result.dead_before,
                result.dead_after,
            )
            # Most of them still there: something (a long transaction) keeps them visible, and
            # vacuuming again soon would only read the table again. Check less often until a
            # vacuum reclaims them.
            held = result.dead_after * 2 >= result.dead_before
            self._every = min(self._every * 2, self._base * MAX_SPREAD) if held else self._base
