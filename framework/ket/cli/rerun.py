"""`ket jobs rerun ID`: a finished job's work enqueued again, as a new job linked to it.

The new job has the finished one's name, input (as stored: sealed secrets stay sealed), queue,
priority, tags, company and unique key, and a fresh attempt count; `ket jobs show` names the
job it reruns, and on the finished job its reruns. Recorded in the tenant's audit log. Exit
codes: 0 rerun, 1 no such job, or it has not finished, or an active job holds its unique key
(the reason is printed), 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from ket.cli.options import deployment_of, workspace_parent
from ket.cli.output import escape, print_json
from ket.cli.runtime import open_tenant_store, single_tenant
from ket.store.contract import QueryableStore, RerunStore
from ket.store.types import TERMINAL_STATES, JobId, JobRecord, Reran

if TYPE_CHECKING:
    from ket.catalog import Catalog

# what `ket jobs retry` is for, said when a job it would take is asked to be rerun
_RETRY_HINT = "`ket jobs retry` is for retryable or discarded work"


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
    job_id: Callable[[str], int],
) -> None:
    """Add `ket jobs rerun` to the actions of `ket jobs`; `job_id` reads an id."""
    helptext = "enqueue a finished job again, as a new job linked to it"
    command = actions.add_parser(
        "rerun", parents=[*parents, workspace_parent()], help=helptext, description=__doc__
    )
    command.add_argument("id", type=job_id, help="the finished job")
    command.add_argument("--format", choices=["text", "json"], default="text")
    command.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ket.catalog import Catalog

    catalog = Catalog.build(deployment_of(args))
    tenant, url = single_tenant(args)
    reran = asyncio.run(_rerun(args, url, catalog, args.id, tenant))
    if reran.inserted is None or reran.inserted.coalesced:
        sys.stderr.write(f"ket: job {args.id}: {escape(_refusal(reran))}\n")
        return 1
    if args.format == "json":
        print_json({"id": reran.inserted.id, "rerun_of": args.id})
    else:
        sys.stdout.write(f"job {args.id} rerun as job {reran.inserted.id}\n")
    return 0


async def _rerun(
    args: argparse.Namespace, url: str, catalog: Catalog, job_id: JobId, tenant: str
) -> Reran:
    from ket.cli.bulk import cli_actor
    from ket.operate import rerun_job

    # with the tenant's control channel: the rerun wakes the workers at once
    store = await open_tenant_store(args.database_url, tenant, url)
    try:
        return await rerun_job(store, catalog, job_id, cli_actor(), tenant=tenant)
    finally:
        await store.close()


def _refusal(reran: Reran) -> str:
    from ket.operate import rerun_text

    text = rerun_text(reran)
    if reran.state is not None and reran.state not in TERMINAL_STATES:
        return f"{text}; {_RETRY_HINT}"
    return text


async def record_and_reruns(
    store: QueryableStore, job_id: JobId
) -> tuple[JobRecord | None, list[JobId]]:
    """The job, and the jobs that rerun it (none where the store keeps no reruns)."""
    record = await store.job_get(job_id)
    if record is None or not isinstance(store, RerunStore):
        return record, []
    return record, await store.job_reruns(job_id)


def link_lines(record: JobRecord, reruns: list[JobId]) -> str:
    """`ket jobs show`'s lines for the job it reruns and the jobs that rerun it (if any)."""
    lines = ""
    if record.rerun_of is not None:
        lines += f"{'rerun of:':<14}job {record.rerun_of}\n"
    if reruns:
        lines += f"{'reruns:':<14}{', '.join(f'job {i}' for i in reruns)}\n"
    return lines
