"""`ket jobs list/show/retry/cancel/prune/stats` (and `enqueue`, `rerun`): one tenant's jobs.

Exit codes: 0 done, 1 the job does not exist or the command does not apply to it (the reason is
printed), or the operator answered no, 2 bad input (unknown tenant, bad option) or a question
that could not be asked (no terminal and no --yes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ket.cli import bulk, enqueue, rerun, selection, workers
from ket.cli.options import deployment_of, workspace_named, workspace_parent
from ket.cli.output import clip, escape, print_json
from ket.cli.runtime import open_tenant_store, single_tenant, tenant_urls
from ket.declare.resolve import worker_config
from ket.display import progress_text
from ket.errors import KetError
from ket.operate import cancel_job, retry_job
from ket.operate.action import change_text
from ket.operate.fleet import SORTS, fleet_rows, sorted_rows
from ket.runtime.prune import prune_batches
from ket.schedule.duration import duration_seconds
from ket.secret import redact_payload
from ket.store.contract import JobStore, QueryableStore
from ket.store.roster import manifest_counts
from ket.store.types import JOB_STATES, TERMINAL_STATES, ClaimLimits, JobQuery, JobRecord, Prune
from ket.store.validate import MAX_BIGINT, MAX_SECONDS

if TYPE_CHECKING:
    from ket.store.sql import SqlStore

T = TypeVar("T")
_INTEGER = re.compile(r"-?[0-9]+")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser("jobs", help="list, inspect and steer jobs", description=__doc__)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)

    # the workspace options say which queues and job names --queue and --job may name
    checked = [*parents, workspace_parent()]
    listing = actions.add_parser("list", parents=checked, help="jobs, newest first")
    listing.add_argument(
        "--state",
        action="append",
        choices=JOB_STATES,
        help="only jobs in this state; repeatable (any of them)",
    )
    listing.add_argument(
        "--queue", action="append", help="only jobs of this queue; repeatable (any of them)"
    )
    listing.add_argument(
        "--job",
        action="append",
        metavar="NAME",
        help="only jobs of this name; repeatable (any of them)",
    )
    listing.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only jobs carrying this tag; repeatable (jobs carrying any of them)",
    )
    listing.add_argument("--limit", type=_positive, default=50)
    listing.add_argument("--offset", type=_not_negative, default=0)
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_list)

    show = actions.add_parser("show", parents=parents, help="one job with payload and errors")
    show.add_argument("id", type=_positive)
    show.add_argument("--format", choices=["text", "json"], default="text")
    show.set_defaults(run=_show)

    for name, helptext in (
        ("retry", "make retryable or discarded jobs available now (history kept)"),
        ("cancel", "cancel jobs that have not finished (running ones are aborted)"),
    ):
        command = actions.add_parser(name, parents=checked, help=helptext, description=helptext)
        command.add_argument("id", type=_positive, nargs="?", help="one job (or use filters)")
        bulk.add_arguments(command, "retry" if name == "retry" else "cancel", _duration)
        command.set_defaults(run=_retry if name == "retry" else _cancel)

    prune = actions.add_parser(
        "prune", parents=[*parents, workspace_parent()], help="delete old finished jobs"
    )
    prune.add_argument(
        "--older-than",
        type=_duration,
        metavar="DURATION",
        help="age of finished jobs to delete, e.g. 12h, 30d, whatever their state (default: "
        "the deployment's retention_ms for each state)",
    )
    prune.set_defaults(run=_prune)

    stats = actions.add_parser(
        "stats", parents=[*parents, workspace_parent()], help="counts by state and queue, ages"
    )
    stats.add_argument("--format", choices=["text", "json"], default="text")
    stats.add_argument(
        "--all-tenants",
        action="store_true",
        help="a line per tenant: jobs by state, oldest available, discarded in the last hour, "
        "live workers",
    )
    stats.add_argument(
        "--sort",
        choices=SORTS,
        default="tenant",
        help="with --all-tenants: the sickest first by this (default: by tenant name)",
    )
    stats.set_defaults(run=_stats)

    # their own modules: an operator's producing, not listing or steering
    enqueue.add_parser(actions, parents)
    rerun.add_parser(actions, parents, _positive)


def _with_store(args: argparse.Namespace, action: Callable[[SqlStore], Awaitable[T]]) -> T:
    tenant, url = single_tenant(args)
    return _on(args, tenant, url, action)


def _on(
    args: argparse.Namespace, tenant: str, url: str, action: Callable[[SqlStore], Awaitable[T]]
) -> T:
    async def run() -> T:
        # with the tenant's control channel: a retried job wakes the workers at once
        store = await open_tenant_store(args.database_url, tenant, url)
        try:
            if not isinstance(store, QueryableStore):
                raise KetError("this store cannot list jobs")
            return await action(store)
        finally:
            await store.close()

    return asyncio.run(run())


def _list(args: argparse.Namespace) -> int:
    query = JobQuery(
        states=tuple(dict.fromkeys(args.state or ())),
        queues=tuple(dict.fromkeys(args.queue or ())),
        names=tuple(dict.fromkeys(args.job or ())),
        tags=tuple(dict.fromkeys(args.tag or ())),
        limit=args.limit,
        offset=args.offset,
    )
    known = selection.declared(args)

    async def listing(store: SqlStore) -> list[JobRecord]:
        await selection.refuse_undeclared(store, known, queues=query.queues, names=query.names)
        return await store.job_list(query)

    records = _with_store(args, listing)
    if args.format == "json":
        print_json([_summary(r) for r in records])
        return 0
    if not records:
        sys.stdout.write("no jobs\n")
        return 0
    header = ("ID", "STATE", "QUEUE", "JOB", "ATTEMPT", "RUN AT", "ERRORS", "TAGS")
    rows: list[tuple[str, ...]] = [header]
    for r in records:
        cells = (
            str(r.id),
            r.state,
            r.queue,
            r.name,
            f"{r.attempt}/{r.max_attempts}",
            r.run_at.isoformat(timespec="seconds"),
            str(len(r.errors)),
            ",".join(r.tags) or "-",
        )
        rows.append(tuple(escape(cell) for cell in cells))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        sys.stdout.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
        sys.stdout.write("\n")
    return 0


def _show(args: argparse.Namespace) -> int:
    record, reruns = _with_store(args, lambda store: rerun.record_and_reruns(store, args.id))
    if record is None:
        sys.stderr.write(f"ket: no job {args.id}\n")
        return 1
    # secret input and result fields, sealed or not, show as ***
    result = None if record.result is None else redact_payload(record.result)
    if args.format == "json":
        payload = redact_payload(record.payload)
        print_json(
            {**_jsonable(asdict(record)), "payload": payload, "result": result, "reruns": reruns}
        )
        return 0
    fields = _summary(record)
    for key in (
        "id",
        "name",
        "state",
        "queue",
        "priority",
        "attempt",
        "max_attempts",
        "unique_key",
        "window_key",
        "company",
        "run_at",
        "enqueued_at",
        "attempted_at",
        "finished_at",
        "worker_id",
        "lease_until",
        "progress",
        "tags",
    ):
        value = fields.get(key)
        if key == "tags":
            value = ", ".join(record.tags) or None
        elif key == "progress":
            value = progress_text(record.progress)
        sys.stdout.write(f"{key + ':':<14}{'-' if value is None else escape(str(value))}\n")
    sys.stdout.write(rerun.link_lines(record, reruns))
    payload = json.dumps(redact_payload(record.payload), sort_keys=True)
    sys.stdout.write(f"{'version:':<14}{record.payload_version}\n")  # the payload's input version
    sys.stdout.write(f"{'payload:':<14}{payload}\n")
    shown = "-" if result is None else json.dumps(result, sort_keys=True)
    sys.stdout.write(f"{'result:':<14}{shown}\n")
    sys.stdout.write(f"errors ({len(record.errors)}):\n")
    for error in record.errors:
        sys.stdout.write(
            f"  attempt {error.attempt} at {error.at.isoformat()}: {escape(error.error)}\n"
        )
        if error.traceback:
            # indented under its error, each line escaped: no line of it can pose as ket's own
            for line in error.traceback.rstrip().split("\n"):
                sys.stdout.write(f"    {escape(line)}\n")
    return 0


def _retry(args: argparse.Namespace) -> int:
    if args.id is None:
        return bulk.run(args, "retry")
    bulk.refuse_with_id(args)
    tenant, url = single_tenant(args)
    change = _on(
        args, tenant, url, lambda store: retry_job(store, args.id, bulk.cli_actor(), tenant=tenant)
    )
    return _changed(args.id, change.changed, change_text(change))


def _cancel(args: argparse.Namespace) -> int:
    if args.id is None:
        return bulk.run(args, "cancel")
    bulk.refuse_with_id(args)
    tenant, url = single_tenant(args)
    change = _on(
        args, tenant, url, lambda store: cancel_job(store, args.id, bulk.cli_actor(), tenant=tenant)
    )
    return _changed(args.id, change.changed, change_text(change))


def _changed(job_id: int, changed: bool, reason: str) -> int:
    if changed:
        sys.stdout.write(f"job {job_id}: {escape(reason)}\n")
        return 0
    sys.stderr.write(f"ket: job {job_id}: {escape(reason)}\n")
    return 1


def _prune(args: argparse.Namespace) -> int:
    if args.older_than is not None:
        batches: Sequence[Prune] = (
            Prune(older_than_seconds=args.older_than, states=TERMINAL_STATES),
        )
    else:  # as the workers prune: each state after its own retention
        batches = prune_batches(worker_config(deployment_of(args)).retention_ms)

    async def prune_all(store: SqlStore) -> int:
        total = 0
        for params in batches:
            while (count := await store.job_prune(params)) > 0:
                total += count
                if count < params.limit:
                    break
        return total

    total = _with_store(args, prune_all)
    sys.stdout.write(f"pruned {total} finished jobs\n")
    return 0


def _stats(args: argparse.Namespace) -> int:
    if args.all_tenants:
        return _fleet(args)
    limits = _claim_limits(args)
    stats = _with_store(args, lambda store: store.job_stats(limits))
    manifests = _manifests(args)
    if args.format == "json":
        print_json(
            {
                "counts": [
                    {"state": state, "queue": queue, "count": count}
                    for (state, queue), count in sorted(stats.counts.items())
                ],
                # of the due jobs, those a fleet-wide limit holds back (with a workspace)
                "limited": [
                    {"queue": queue, "count": count} for queue, count in stats.limited.items()
                ],
                # of the discarded jobs, those that expired unstarted (expires_in)
                "expired": [
                    {"queue": queue, "count": count} for queue, count in stats.expired.items()
                ],
                "oldest_lease_age_seconds": stats.oldest_lease_age,
                "oldest_available_age_seconds": stats.oldest_available_age,
                "dead_rows": stats.dead_rows,
                "live_rows": stats.live_rows,
                "long_transactions": [asdict(t) for t in stats.long_transactions],
                # manifest hash -> live workers running it (None: the control database
                # could not be read)
                "manifests": manifests,
                "manifest_mismatch": manifests is not None and len(manifests) > 1,
            }
        )
        return 0
    queues = sorted({queue for _, queue in stats.counts})
    shown = {queue: escape(queue) for queue in queues}
    states = [s for s in JOB_STATES if any(key[0] == s for key in stats.counts)]
    if not queues:
        sys.stdout.write("no jobs\n")
    else:
        width = max(len(q) for q in [*shown.values(), "QUEUE"])
        # of the due jobs, those a limit holds back; of the discarded, those that expired
        # unstarted: a column each only where some are
        extra = {
            name: by_queue
            for name, by_queue in (("limited", stats.limited), ("expired", stats.expired))
            if any(by_queue.values())
        }
        columns = "".join(f"  {s:>10}" for s in [*states, *extra])
        sys.stdout.write("QUEUE".ljust(width) + columns + "\n")
        for queue in queues:
            counts = "".join(f"  {stats.counts.get((s, queue), 0):>10}" for s in states)
            counts += "".join(f"  {by_queue.get(queue, 0):>10}" for by_queue in extra.values())
            sys.stdout.write(shown[queue].ljust(width) + counts + "\n")
    sys.stdout.write(f"oldest lease age: {_age(stats.oldest_lease_age)}\n")
    sys.stdout.write(f"oldest available age: {_age(stats.oldest_available_age)}\n")
    if stats.dead_rows is not None:
        sys.stdout.write(
            f"dead rows in the jobs table: {stats.dead_rows} (live: {stats.live_rows})\n"
        )
    for open_ in stats.long_transactions:
        who = escape(open_.application or "no application name")
        sys.stdout.write(
            f"transaction open for {_age(open_.seconds)}: pid {open_.pid} ({who}, "
            f"{escape(open_.state or 'state hidden')}); it keeps dead rows from a vacuum\n"
        )
    if manifests is not None and len(manifests) > 1:
        sys.stdout.write(workers.mismatch_line(manifests) + "\n")
    return 0


def _claim_limits(args: argparse.Namespace) -> dict[str, ClaimLimits] | None:
    """The queues' fleet-wide limits, from the workspace when there is one to load (their
    held-back jobs are counted); None without, or (with a warning) when it does not load."""
    if not workspace_named(args):
        return None
    from ket.catalog import Catalog

    try:
        return dict(Catalog.build(deployment_of(args)).claim_limits)
    except KetError as error:
        sys.stderr.write(
            f"ket: warning: jobs held back by limits are not counted: {escape(error.message)}\n"
        )
        return None


def _fleet(args: argparse.Namespace) -> int:
    """`ket jobs stats --all-tenants`: a line per tenant (operate/fleet.py)."""
    if args.tenant is not None:
        raise KetError("--all-tenants lists every tenant: leave out --tenant")
    tenants = tenant_urls(args)
    try:
        _, seen = workers.read_workers(args.database_url)
    except KetError as error:
        sys.stderr.write(f"ket: warning: cannot read the workers: {escape(error.message)}\n")
        seen = []

    async def opened(name: str, url: str) -> JobStore:
        from ket.store.sql import SqlStore

        return await SqlStore.open(url)

    rows = sorted_rows(asyncio.run(fleet_rows(tenants, opened, seen, close=True)), args.sort)
    if args.format == "json":
        print_json(
            [
                {
                    "tenant": row.tenant,
                    "counts": dict(row.counts),
                    "oldest_available_age_seconds": row.oldest_available_age,
                    "discarded_last_hour": row.discarded_last_hour,
                    "live_workers": row.live_workers,
                    "problem": row.problem,
                }
                for row in rows
            ]
        )
        return 0
    width = max(len(name) for name in ["TENANT", *(row.tenant for row in rows)])
    states = ("available", "scheduled", "executing", "retryable", "discarded")
    heads = [*states, "oldest avail", "discarded 1h", "workers"]
    sys.stdout.write("TENANT".ljust(width) + "".join(f"  {h:>12}" for h in heads) + "\n")
    for row in rows:
        if row.problem is not None:
            sys.stdout.write(f"{row.tenant.ljust(width)}  unreadable: {escape(row.problem)}\n")
            continue
        cells = [str(row.counts.get(state, 0)) for state in states]
        cells += [_age(row.oldest_available_age), str(row.discarded_last_hour)]
        cells.append(str(row.live_workers))
        sys.stdout.write(row.tenant.ljust(width) + "".join(f"  {c:>12}" for c in cells) + "\n")
    return 0


def _manifests(args: argparse.Namespace) -> dict[str, int] | None:
    """Manifest hash -> how many live workers run it, from the control database; None (and a
    warning) when it cannot be read: the job counts are shown all the same."""
    try:
        _, seen = workers.read_workers(args.database_url)
    except KetError as error:
        sys.stderr.write(f"ket: warning: cannot read the workers: {escape(error.message)}\n")
        return None
    return manifest_counts(seen)


def _summary(record: JobRecord) -> dict[str, Any]:
    data: dict[str, Any] = _jsonable(asdict(record))
    data.pop("payload")
    data.pop("result")  # job_get's alone
    data["errors"] = len(record.errors)
    return data


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _integer(text: str, low: int) -> int:
    """`text` as a whole number from `low` to 2**63 - 1 (what the stores' columns hold)."""
    # ASCII digits only: int() would also take " 7", "1_0" and other scripts' digits; and past
    # 19 digits the number is out of range anyway (int() refuses 4,300 and more)
    if _INTEGER.fullmatch(text) and len(text) <= 20 and low <= int(text) <= MAX_BIGINT:
        return int(text)
    raise argparse.ArgumentTypeError(
        f"must be a whole number from {low} to {MAX_BIGINT}, got {clip(text, 60)!r}"
    )


def _positive(text: str) -> int:
    return _integer(text, 1)


def _not_negative(text: str) -> int:
    return _integer(text, 0)


def _duration(text: str) -> float:
    seconds = duration_seconds(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 12h or 30d, got {clip(text, 60)!r}"
        )
    if seconds > MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"a duration must be at most {MAX_SECONDS // 86_400}d (a century), got {text!r}"
        )
    return float(seconds)
