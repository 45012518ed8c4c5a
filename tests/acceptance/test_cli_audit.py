"""`ket jobs retry` and `ket jobs cancel` leave entries in the tenant's audit log, as the
dashboard's actions do: who (user@host, through the CLI), what, and what came of it."""

from __future__ import annotations

import asyncio
import getpass
import socket
from pathlib import Path

from ket.store import AuditQuery, JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from tests.acceptance.conftest import run_ket


def test_cli_retries_and_cancels_are_audited(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"

    async def arrange() -> None:
        store = await SqlStore.open(url, migrate=True)
        await store.job_insert([NewJob(name="a.b", queue="q", max_attempts=1) for _ in range(3)])
        [job] = await store.job_claim(JobClaim(queue="q", limit=1, worker_id="w", lease_seconds=9))
        await store.job_settle([Settle(id=job.id, fence=job.fence, outcome="discarded")])
        await store.close()

    async def entries() -> list[tuple[object, ...]]:
        store = await SqlStore.open(url)
        found = await store.audit_list(AuditQuery())
        await store.close()
        return [
            (r.entry.subject, r.entry.source, r.entry.action, r.entry.job_id, r.entry.changed)
            for r in found
        ]

    asyncio.run(arrange())
    args = ["--database-url", url]
    assert run_ket("jobs", "retry", "1", *args, cwd=tmp_path).code == 0
    bulk = run_ket("jobs", "cancel", "--queue", "q", "--yes", *args, cwd=tmp_path)
    assert bulk.code == 0, bulk.err
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    assert asyncio.run(entries()) == [
        (who, "cli", "cancel", None, 3),
        (who, "cli", "retry", 1, 1),
    ]
