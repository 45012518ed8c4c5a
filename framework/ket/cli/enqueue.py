"""`ket jobs enqueue JOB JSON`: enqueue a job as an operator, through the client's path.

The job is validated and written exactly as `open_client(...).enqueue` does it (the client is
used: the input checked against the job's declaration, the options read by the catalog, the
waiting workers woken after the commit), then recorded in the tenant's audit log as `ket jobs
retry` and `ket jobs cancel` are. Exit codes: 0 enqueued (or coalesced with the active job
holding its unique key, or the job of its key under a unique window or debounce), 2 bad input,
nothing written.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

from pydantic import ValidationError

from ket.cli.call import invalid_input, parse_input
from ket.cli.options import deployment_of, workspace_parent
from ket.cli.output import clip, escape, print_json
from ket.cli.runtime import open_store, single_tenant
from ket.declare.deployment import DeploymentDecl
from ket.store.types import Inserted

_INTEGER = re.compile(r"-?[0-9]{1,19}")


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Add `ket jobs enqueue` to the actions of `ket jobs`."""
    helptext = "enqueue a job, as a client would (validated, audited)"
    command = actions.add_parser(
        "enqueue", parents=[*parents, workspace_parent()], help=helptext, description=__doc__
    )
    command.add_argument("job", metavar="JOB", help="the job, <module>.<job>")
    command.add_argument("input", nargs="?", default="{}", help="its input as a JSON object")
    # not a mutually exclusive group: the catalog refuses both, as for every producer
    command.add_argument(
        "--run-in", metavar="DURATION", help="due after this delay, e.g. 90s, 5m, 2h, 1d"
    )
    command.add_argument(
        "--run-at", metavar="TIME", help="due at this ISO-8601 time with an offset (or Z)"
    )
    command.add_argument(
        "--expires-in",
        metavar="DURATION",
        help="discard it unstarted if not started this long after it is due, e.g. 10m",
    )
    command.add_argument("--tag", action="append", metavar="TAG", help="a tag; repeatable")
    command.add_argument("--priority", type=_priority, metavar="N", help="lower runs first")
    command.add_argument("--unique-key", metavar="KEY", help="coalesce with an active job")
    command.add_argument("--format", choices=["text", "json"], default="text")
    command.set_defaults(run=run)


def _priority(text: str) -> int:
    """A whole number (its range is the store's to check, naming the job)."""
    if not _INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be a whole number, got {clip(text, 60)!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    from ket.client import open_client

    deployment = deployment_of(args)
    payload = parse_input(args.input)
    tenant, url = single_tenant(args)
    options: dict[str, Any] = {
        "run_in": args.run_in,
        "run_at": args.run_at,
        "priority": args.priority,
        "unique_key": args.unique_key,
        "tags": args.tag,
        "expires_in": args.expires_in,
    }
    with open_client(deployment, tenant=tenant, database_url=args.database_url) as client:
        try:
            inserted = client.enqueue(args.job, payload, **options)
        except ValidationError as error:
            raise invalid_input(args.job, error) from None
    asyncio.run(_traced(url, args.job, inserted, tenant))
    _report(args, inserted, _joined(deployment, args))
    return 0


def _joined(deployment: DeploymentDecl, args: argparse.Namespace) -> str:
    """What a coalesced enqueue of `args.job` joined, as the report says it."""
    decl = next((job for job in deployment.jobs() if job.qualified_name == args.job), None)
    if decl is not None and decl.debounce is not None:
        return "not started yet: it takes this input and its run time moves (debounce)"
    if decl is not None and decl.unique is not None:
        return "enqueued within the unique window of its key"
    return f"active with unique key {escape(repr(args.unique_key))}"


async def _traced(url: str, name: str, inserted: Inserted, tenant: str) -> None:
    from ket.cli.bulk import cli_actor
    from ket.operate import enqueue_traced

    store = await open_store(url)
    try:
        await enqueue_traced(store, name, inserted, cli_actor(), tenant=tenant)
    finally:
        await store.close()


def _report(args: argparse.Namespace, inserted: Inserted, joined: str) -> None:
    name = escape(args.job)
    if args.format == "json":
        value = {"id": inserted.id, "job": args.job, "coalesced": inserted.coalesced}
        print_json(value)
    elif inserted.coalesced:
        sys.stdout.write(f"coalesced with job {inserted.id} ({name}), {joined}\n")
    else:
        sys.stdout.write(f"enqueued job {inserted.id} ({name})\n")
