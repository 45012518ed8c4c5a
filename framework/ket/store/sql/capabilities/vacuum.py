"""VacuumStore: VACUUM the jobs table when dead rows pile up (PostgreSQL; see
ket.store.sql.vacuum).
"""

from __future__ import annotations

from ket.store import validate
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.vacuum import vacuum_jobs
from ket.store.types import Vacuum, Vacuumed


class SqlVacuum(SqlSession):
    """The jobs table's upkeep."""

    async def job_vacuum(self, vacuum: Vacuum) -> Vacuumed:
        """VACUUM the jobs table once dead row versions pile up (PostgreSQL; see vacuum.py)."""
        validate.check_vacuum(vacuum)
        if self.dialect != "postgresql":  # SQLite rewrites rows in place: nothing is left dead
            return Vacuumed(outcome="not_needed")
        # single: an autocommit connection, as VACUUM cannot run inside a transaction
        return await self._hot(lambda rows: vacuum_jobs(rows, vacuum), single=True, lasting=True)
