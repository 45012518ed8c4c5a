"""RerunStore: a finished job's rerun, linked to it (statements in ket.store.sql.rerun)."""

from __future__ import annotations

from ket.store import validate
from ket.store.sql.capabilities.session import SqlSession
from ket.store.types import JobId, Reran, Rerun


class SqlReruns(SqlSession):
    """Reruns of finished jobs."""

    async def job_rerun(self, rerun: Rerun) -> Reran:
        """Insert a finished job's rerun, linked to it; refused when it has not finished."""
        payloads = validate.check_rerun(rerun)
        now = self._now()
        from ket.store.sql import rerun as reruns

        reran = await self._transact(lambda conn: reruns.rerun(conn, now, rerun, payloads))
        if reran.inserted is not None and not reran.inserted.coalesced:
            self._woken([rerun.job], now)
        return reran

    async def job_reruns(self, job_id: JobId) -> list[JobId]:
        """The ids of the jobs that rerun `job_id`, oldest first."""
        validate.check_job_id(job_id)
        from ket.store.sql import rerun as reruns

        return await self._transact(lambda conn: reruns.reruns(conn, job_id))
