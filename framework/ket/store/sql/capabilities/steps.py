"""StepStore: the durable steps of a job's handler (statements in ket.store.sql.query)."""

from __future__ import annotations

import json

from ket.store import validate
from ket.store.sql import statement as stmt
from ket.store.sql.capabilities.session import SqlSession
from ket.store.sql.fetch import Rows
from ket.store.types import JobId, StepRecord


class SqlSteps(SqlSession):
    """Steps recorded under the attempt's fence, read back by later attempts."""

    async def job_steps(self, job_id: JobId) -> dict[str, str]:
        """The steps of `job_id` recorded so far: name -> the JSON text of its value."""
        validate.check_job_id(job_id)

        async def body(conn: Rows) -> list[tuple[str, object]]:
            return await conn.tuples(stmt.STEPS_OF, {"p_job_id": job_id})

        rows = await self._hot(body, single=True)
        # the column reads back as the value (JSON decoded): as JSON text again
        return {
            name: json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            for name, value in rows
        }

    async def job_step_record(self, step: StepRecord) -> bool:
        """Record `step` if its fence still holds the executing job; False otherwise."""
        validate.check_step(step)
        params = {
            "p_job_id": step.id,
            "p_fence": step.fence,
            "p_name": step.name,
            "p_value": step.value,
            "now": self._now(),
        }

        async def body(conn: Rows) -> list[object]:
            return await conn.rows(stmt.STEP_RECORD, params)

        written = await self._hot(body, single=True)
        # nothing written: the fence no longer holds (or the step was recorded already)
        return bool(written)
