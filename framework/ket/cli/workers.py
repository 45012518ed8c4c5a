"""`ket workers list`: the worker processes recorded in the control database.

The control database is the tenant registry's once a registry exists, else the single tenant's
own database. Each running `ket worker` records itself there at start, refreshes its row every
third of a lease (at least every second, at most every minute) and removes it when it stops
cleanly; a row not refreshed for three of its intervals is marked stale (the worker was killed,
or is cut off from that database), and one not refreshed for a day is deleted.

With a workspace (--workspace, or [tool.ket] in pyproject.toml) it warns of each queue the
deployment declares that no live worker serves (ket worker --queues leaves queues out): its
jobs wait until a worker serves it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ket.cli.options import deployment_of, workspace_named, workspace_parent
from ket.cli.output import escape, print_json, write_table
from ket.cli.runtime import control_url, registry_parent
from ket.connection.database_url import shown_url
from ket.declare.resolve import worker_config
from ket.store.roster import SHORT_HASH, SeenWorker, manifest_counts, unserved_queues


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "workers",
        help="list the worker processes and the manifests they run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list",
        parents=[registry_parent(), workspace_parent()],
        help="the workers, oldest first, stale ones marked",
    )
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_list)


def read_workers(database_url: str | None) -> tuple[str, list[SeenWorker]]:
    """The control database's URL and its workers, oldest first; `database_url` is the
    --database-url option."""
    from ket.cli.presence import open_roster

    url = control_url(database_url)

    async def read() -> list[SeenWorker]:
        roster = open_roster(url)
        try:
            return await roster.worker_list()
        finally:
            await roster.close()

    return url, asyncio.run(read())


def worker_json(worker: SeenWorker) -> dict[str, Any]:
    """One worker as `ket workers list --format json` shows it."""
    info = worker.info
    return {
        "id": info.id,
        "host": info.host,
        "pid": info.pid,
        "started_at": info.started_at.isoformat(),
        "last_seen_at": worker.last_seen_at.isoformat(),
        "last_seen_seconds_ago": round(worker.seen_seconds_ago, 3),
        "stale": worker.stale,
        "tenants": "all" if info.tenants is None else list(info.tenants),
        "queues": dict(info.queues),
        "version": info.version,
        "manifest_hash": info.manifest_hash,
        "interval_seconds": info.interval_seconds,
    }


def _list(args: argparse.Namespace) -> int:
    declared = _declared_queues(args)  # a broken workspace is refused before reading
    url, workers = read_workers(args.database_url)
    unserved = None if declared is None else unserved_queues(declared, workers)
    if args.format == "json":
        document = {
            "control_database": shown_url(url),
            "workers": [worker_json(w) for w in workers],
            "manifests": manifest_counts(workers),
            "unserved_queues": unserved,
        }
        print_json(document)
        return 0
    if not workers:
        sys.stdout.write(f"no workers recorded in {escape(shown_url(url))}\n")
        return 0
    header = ("ID", "HOST", "PID", "STARTED", "LAST SEEN", "TENANTS", "QUEUES", "VERSION")
    rows: list[tuple[str, ...]] = [(*header, "MANIFEST", "STATUS")]
    for worker in workers:
        rows.append(tuple(escape(cell) for cell in _cells(worker)))
    write_table(rows)
    counts = manifest_counts(workers)
    if len(counts) > 1:
        sys.stdout.write(mismatch_line(counts) + "\n")
    sys.stdout.flush()  # the warnings come after the table, on a terminal or in one file
    for queue in unserved or ():
        sys.stderr.write(f"ket: warning: {escape(unserved_line(queue))}\n")
    return 0


def unserved_line(queue: str) -> str:
    """The warning that no live worker serves `queue`."""
    return f"queue {queue!r} is served by no live worker; its jobs wait until one serves it"


def _declared_queues(args: argparse.Namespace) -> list[str] | None:
    """The queues of the command line's deployment; None without a workspace to load."""
    if not workspace_named(args):
        return None
    return sorted(worker_config(deployment_of(args)).queues)


def mismatch_line(counts: dict[str, int]) -> str:
    """The line saying that live workers run more than one manifest, with how many run each."""
    each = ", ".join(
        f"{digest[:SHORT_HASH]} ({n} worker{'' if n == 1 else 's'})" for digest, n in counts.items()
    )
    return (
        f"live workers run {len(counts)} different manifests: {each}; deploy one manifest to "
        "all of them"
    )


def _cells(worker: SeenWorker) -> tuple[str, ...]:
    info = worker.info
    tenants = "all" if info.tenants is None else ",".join(info.tenants) or "-"  # none: stopping
    queues = ",".join(f"{queue}={n}" for queue, n in sorted(info.queues.items()))
    return (
        info.id,
        info.host,
        str(info.pid),
        info.started_at.isoformat(timespec="seconds"),
        f"{worker.seen_seconds_ago:.1f}s ago",
        tenants,
        queues or "-",
        info.version,
        info.manifest_hash[:SHORT_HASH],
        "stale" if worker.stale else "live",
    )
