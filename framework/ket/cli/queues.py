"""`ket queues list/pause/resume`: the deployment's queues in one tenant, and an operator's
pause of one. A paused queue's jobs wait: no worker claims them until it is resumed, the
attempts running when it was paused finish, and enqueues go on.

Exit codes: 0 done, 2 bad input (a queue the deployment does not declare, an unknown tenant, a
bad option).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TypeVar

from ket.catalog import Catalog
from ket.cli.bulk import cli_actor
from ket.cli.output import escape, print_json, write_table
from ket.cli.runtime import on_tenant_store
from ket.operate import (
    QueueRow,
    declared_queue,
    pause_queue,
    queue_rows,
    resumable_queue,
    resume_queue,
)

if TYPE_CHECKING:
    from ket.store.sql import SqlStore

T = TypeVar("T")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser("queues", help="see, pause and resume queues", description=__doc__)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", parents=parents, help="each queue: paused or not, its jobs by state"
    )
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_list)
    for name, helptext, run in (
        ("pause", "stop every worker from claiming a queue's jobs (running ones finish)", _pause),
        ("resume", "let the workers claim a paused queue's jobs again", _resume),
    ):
        action = actions.add_parser(name, parents=parents, help=helptext)
        action.add_argument("queue", metavar="QUEUE", help="a queue of the deployment, e.g. mail")
        action.add_argument("--format", choices=["text", "json"], default="text")
        action.set_defaults(run=run)


def _list(args: argparse.Namespace) -> int:
    async def rows(store: SqlStore, catalog: Catalog, tenant: str) -> list[QueueRow]:
        return await queue_rows(store, catalog)

    found = [row.to_json() for row in on_tenant_store(args, rows)]
    if args.format == "json":
        print_json({"queues": found})
        return 0
    header = ("QUEUE", "STATE", "AVAILABLE", "SCHEDULED", "EXECUTING", "RETRYABLE", "OLDEST")
    table = [header]
    for row in found:
        oldest = row["oldest_available_seconds"]
        table.append(
            (
                escape(row["queue"]),
                "paused" if row["paused"] else "active",
                str(row["available"]),
                str(row["scheduled"]),
                str(row["executing"]),
                str(row["retryable"]),
                "-" if oldest is None else f"{oldest:.1f}s",
            )
        )
    write_table(table)
    for row in found:
        if row["paused"]:
            sys.stdout.write(
                f"{escape(row['queue'])} paused by {escape(row['paused_by'])} "
                f"at {row['paused_at']}\n"
            )
    return 0


def _pause(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=True)


def _resume(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=False)


def _set_paused(args: argparse.Namespace, *, paused: bool) -> int:
    async def act(store: SqlStore, catalog: Catalog, tenant: str) -> bool:
        if paused:
            queue = declared_queue(catalog, args.queue)
            return await pause_queue(store, queue, cli_actor(), tenant=tenant)
        # a pause the deployment outlived is listed, and lifted, too
        queue = await resumable_queue(store, catalog, args.queue)
        return await resume_queue(store, queue, cli_actor(), tenant=tenant)

    changed = on_tenant_store(args, act)
    word = "paused" if paused else "resumed"
    if args.format == "json":
        print_json({"queue": args.queue, "paused": paused, "changed": changed})
        return 0
    shown = escape(args.queue)
    if not changed:
        sys.stdout.write(f"queue {shown} was already {word}\n")
    elif paused:
        sys.stdout.write(
            f"queue {shown} paused: no worker claims its jobs until it is resumed "
            "(running jobs finish)\n"
        )
    else:
        sys.stdout.write(f"queue {shown} resumed\n")
    return 0
