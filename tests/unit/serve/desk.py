"""The deployment the dashboard's and the operator API's tests serve: jobs in two queues, a
schedule, a secret input field, and tokens for principals with and without the operators'
permissions."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.declare.deployment import DeploymentDecl
from ket.serve import AuthRequest, Principal
from ket.store import JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from ket.store.types import ErrorInfo, Heartbeat, Lease

# token -> principal; "acme-admin" holds for tenant acme alone
TOKENS = {
    "admin": Principal(subject="ada", permissions={"jobs:read", "jobs:write"}),
    "reader": Principal(subject="rita", permissions={"jobs:read"}),
    "caller": Principal(subject="carl", permissions={"call:*"}),
    "ops": Principal(subject="otto", permissions={"jobs:read", "queues:write"}),
    "pauser": Principal(subject="paula", permissions={"queues:write"}),
    "scheduler": Principal(subject="sam", permissions={"jobs:read", "schedules:write"}),
    "fleet": Principal(subject="fran", permissions={"jobs:read", "fleet:read"}),
}
ACME_ADMIN = Principal(subject="acme-ops", permissions={"jobs:read", "jobs:write"})


async def authenticate(request: AuthRequest) -> Principal | None:
    token = request.bearer_token()
    if token == "acme-admin":
        return ACME_ADMIN if request.tenant == "acme" else None
    return TOKENS.get(token or "")


async def send(ctx: Any, input: Any) -> None:
    """Send a message."""


async def tick(ctx: Any, input: Any) -> None:
    """Tick."""


desk = define_module(
    name="desk",
    jobs={
        "send": define_job(
            input={"to": "string", "card": "secret?"},
            queue="mail",
            idempotent=True,
            max_attempts=1,
            handler=send,
        ),
        "tick": define_job(idempotent=True, schedule={"every": "1m"}, handler=tick),
    },
)


def deployment(**serve: Any) -> DeploymentDecl:
    """The desk deployment; `serve` as given (default: the token authenticator)."""
    return define_deployment(
        name="desk",
        modules=[desk],
        worker={"queues": {"default": 1, "mail": 3}},
        serve={"authenticate": authenticate, **serve},
    )


CATALOG = Catalog.build(deployment())


def send_job(to: str = "ada@example.com", **input: Any) -> NewJob:
    """A desk.send job, built as an enqueue builds it (secret fields marked)."""
    return CATALOG.new_job("desk.send", {"to": to, **input})


def arrange(
    url: str, jobs: Sequence[NewJob], *, discard: int = 0, error: str = "boom"
) -> list[int]:
    """Insert `jobs` into the tenant database at `url`; the first `discard` of them (queue
    mail) are run once and discarded with `error`. Their ids."""

    async def main() -> list[int]:
        store = await SqlStore.open(url)
        try:
            ids = [row.id for row in await store.job_insert(list(jobs))]
            if discard:
                claim = JobClaim(queue="mail", limit=discard, worker_id="w", lease_seconds=30)
                claimed = await store.job_claim(claim)
                await store.job_settle(
                    [
                        Settle(
                            id=job.id,
                            fence=job.fence,
                            outcome="discarded",
                            error=ErrorInfo(error=error, traceback=f"Traceback:\n  {error}"),
                        )
                        for job in claimed
                    ]
                )
            return ids
        finally:
            await store.close()

    return asyncio.run(main())


def complete(url: str, job_id: int, result: str) -> None:
    """Claim job `job_id` (queue mail) and complete it with `result` (JSON text)."""

    async def main() -> None:
        store = await SqlStore.open(url)
        try:
            claim = JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
            [job] = await store.job_claim(claim)
            assert job.id == job_id
            settle = Settle(id=job.id, fence=job.fence, outcome="completed", result=result)
            applied = await store.job_settle([settle])
            assert applied.applied == (job_id,)
        finally:
            await store.close()

    asyncio.run(main())


def report(url: str, job_id: int, progress: str) -> None:
    """Claim job `job_id` (queue mail) and write `progress` (JSON text) with its heartbeat."""

    async def main() -> None:
        store = await SqlStore.open(url)
        try:
            claim = JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
            [job] = await store.job_claim(claim)
            lease = Lease(id=job.id, fence=job.fence, progress=progress)
            beat = await store.job_heartbeat(Heartbeat(leases=[lease], lease_seconds=30))
            assert beat.extended == (job_id,)
        finally:
            await store.close()

    asyncio.run(main())


def states(url: str) -> dict[int, str]:
    """Job id -> state, in the tenant database at `url`."""

    async def main() -> dict[int, str]:
        store = await SqlStore.open(url)
        try:
            from ket.store import JobQuery

            return {r.id: r.state for r in await store.job_list(JobQuery(limit=1_000))}
        finally:
            await store.close()

    return asyncio.run(main())


def audit(url: str) -> list[Any]:
    """The audit entries of the tenant database at `url`, newest first."""

    async def main() -> list[Any]:
        store = await SqlStore.open(url)
        try:
            from ket.store import AuditQuery

            return [r.entry for r in await store.audit_list(AuditQuery())]
        finally:
            await store.close()

    return asyncio.run(main())


def pauses(url: str) -> dict[str, str]:
    """Paused queue -> who paused it, in the tenant database at `url`."""

    async def main() -> dict[str, str]:
        store = await SqlStore.open(url)
        try:
            return {q: p.paused_by for q, p in (await store.queue_pauses()).items()}
        finally:
            await store.close()

    return asyncio.run(main())


def pause(url: str, queue: str, by: str = "someone") -> None:
    """Pause `queue` in the tenant database at `url`, as an operator did before."""

    async def main() -> None:
        store = await SqlStore.open(url)
        try:
            await store.queue_pause(queue, paused_by=by)
        finally:
            await store.close()

    asyncio.run(main())


def schedule_states(url: str) -> dict[str, bool]:
    """Scheduled job -> paused, of the schedules with a row in the tenant database at `url`."""

    async def main() -> dict[str, bool]:
        store = await SqlStore.open(url)
        try:
            found = await store.schedule_get(["desk.tick"])
            return {name: state.paused for name, state in found.items()}
        finally:
            await store.close()

    return asyncio.run(main())
