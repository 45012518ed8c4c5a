"""The queues and job names an operator picks jobs by (`--queue`, `--job`), checked against the
deployment when there is one to check against.

A typo (`ket jobs list --queue exprots`) would otherwise select nothing and read as an empty
queue. The check needs a workspace, given (`--workspace`, `--deployment`) or configured
(`[tool.ket]`); without one, as on an operator's machine that has only the database URL, the
values are taken as they are. A value the deployment does not declare is still taken while a
job in the tenant's database has it: the jobs of a queue or a job since removed can still be
listed, retried and cancelled.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ket.cli.options import deployment_of, workspace_named
from ket.cli.output import clip
from ket.declare.resolve import worker_config
from ket.errors import KetError
from ket.store.contract import QueryableStore
from ket.store.types import JobQuery

SHOWN = 20  # the known values an error lists at most


@dataclass(frozen=True, kw_only=True)
class Declared:
    """The queues (the worker's and the jobs') and the job names of one deployment."""

    deployment: str
    queues: frozenset[str]
    jobs: frozenset[str]


def declared(args: argparse.Namespace) -> Declared | None:
    """What the command line's deployment declares, when `--queue` or `--job` is given and a
    workspace is named (options or `[tool.ket]`); None when there is nothing to check."""
    if not (args.queue or args.job) or not workspace_named(args):
        return None
    deployment = deployment_of(args)
    queues = set(worker_config(deployment).queues)
    queues.update(job.queue for job in deployment.jobs() if isinstance(job.queue, str))
    return Declared(
        deployment=deployment.name,
        queues=frozenset(queues),
        jobs=frozenset(job.qualified_name for job in deployment.jobs()),
    )


async def refuse_undeclared(
    store: QueryableStore,
    known: Declared | None,
    *,
    queues: Sequence[str],
    names: Sequence[str],
) -> None:
    """KetError naming the first of `queues` or `names` that the deployment does not declare
    and no job in `store` has; nothing when `known` is None."""
    if known is None:
        return
    for value in queues:
        if value not in known.queues and not await store.job_list(
            JobQuery(queues=(value,), limit=1)
        ):
            raise KetError(_unknown("queue", value, known.queues, known.deployment))
    for value in names:
        if value not in known.jobs and not await store.job_list(JobQuery(names=(value,), limit=1)):
            raise KetError(_unknown("job", value, known.jobs, known.deployment))


def _unknown(kind: str, value: str, known: Collection[str], deployment: str) -> str:
    listed = sorted(known)
    shown = ", ".join(listed[:SHOWN]) or "none"
    if len(listed) > SHOWN:
        shown += f" and {len(listed) - SHOWN} more"
    close = difflib.get_close_matches(value, listed, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"no {kind} {clip(value, 60)!r} in deployment {deployment!r}, nor in any job of this "
        f"tenant ({kind}s: {shown}){hint}"
    )
