"""`ket jobs retry` and `ket jobs cancel` by filter: every matching job, a batch at a time.

An operator never changes "everything" by accident: the filter form needs at least one filter,
or `--all` said out loud. It counts the matching jobs first and shows a sample; it asks on the
terminal before changing anything (naming the count and the database), and refuses rather than
hangs when there is no terminal to ask on and no `--yes`. The work goes in batches of
BULK_BATCH jobs, one transaction each, on the jobs counted: their ids are bounded by the highest
id counted, so a job enqueued after the question was asked is never touched.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ket.cli import selection
from ket.cli.output import escape, print_json, write_table
from ket.cli.runtime import open_store, open_tenant_store, single_tenant
from ket.connection.database_url import shown_url
from ket.errors import KetError
from ket.operate import Actor, apply_bulk, count_bulk, selection_of
from ket.operate.bulk import SAMPLE
from ket.store.contract import BulkStore
from ket.store.types import (
    CANCEL_STATES,
    RETRY_STATES,
    BulkAction,
    BulkCount,
    JobFilter,
    JobRecord,
    JobState,
    StateChange,
)

if TYPE_CHECKING:
    from ket.store.sql import SqlStore

_STATES: dict[BulkAction, tuple[JobState, ...]] = {"retry": RETRY_STATES, "cancel": CANCEL_STATES}
_DONE = {"retry": "retried", "cancel": "cancelled"}
_FILTERS = ("state", "queue", "job", "tag", "older_than")
_BULK_ONLY = (*_FILTERS, "all", "dry_run", "yes", "format")


def add_arguments(
    parser: argparse.ArgumentParser, action: BulkAction, duration: Callable[[str], float]
) -> None:
    """The filter form's options on the `retry` or `cancel` parser."""
    states = _STATES[action]
    group = parser.add_argument_group("by filter (instead of an id)")
    group.add_argument(
        "--state",
        action="append",
        type=_states_of(action),
        metavar="STATE",
        help=f"only jobs in this state ({', '.join(states)}); repeatable, or a comma list",
    )
    group.add_argument(
        "--queue", action="append", help="only jobs of this queue; repeatable (any of them)"
    )
    group.add_argument(
        "--job", action="append", metavar="NAME", help="only jobs of this name; repeatable"
    )
    group.add_argument(
        "--tag",
        action="append",
        metavar="TAG",
        help="only jobs carrying this tag; repeatable (jobs carrying any of them)",
    )
    group.add_argument(
        "--older-than",
        type=duration,
        metavar="DURATION",
        help="only jobs enqueued more than this long ago, e.g. 30m, 12h, 7d",
    )
    group.add_argument(
        "--all", action="store_true", help=f"every {' or '.join(states)} job (no filter)"
    )
    group.add_argument(
        "--dry-run",
        action="store_true",
        help="count the jobs and show the first ones; change nothing",
    )
    group.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    group.add_argument("--format", choices=["text", "json"], default=None)


def run(args: argparse.Namespace, action: BulkAction) -> int:
    """The filter form of `ket jobs retry` or `ket jobs cancel`."""
    if not (args.all or any(getattr(args, name) not in (None, []) for name in _FILTERS)):
        raise KetError(
            f"ket jobs {action} needs a job id, or filters (--state, --queue, --job, --tag, "
            "--older-than), or --all for every job it applies to"
        )
    tenant, url = single_tenant(args)
    target = Target(
        action=action, tenant=tenant, database=shown_url(url), json=args.format == "json"
    )
    known = selection.declared(args)
    job_filter, counted = asyncio.run(_count(url, args, action, known))
    if args.dry_run:
        target.preview(counted)
        return 0
    if counted.count == 0:
        target.result(counted, 0, [])
        return 0
    if not args.yes and not _confirmed(target, counted):
        return 1 if sys.stdin.isatty() else 2
    changed, skipped = asyncio.run(_apply(args, url, job_filter, counted, target))
    target.result(counted, changed, skipped)
    return 0


@dataclass(frozen=True, kw_only=True)
class Target:
    """What a bulk command acts on, and how it reports: the tenant, its database (no password)."""

    action: BulkAction
    tenant: str
    database: str
    json: bool

    def where(self) -> str:
        return f"tenant {escape(self.tenant)} ({escape(self.database)})"

    def preview(self, counted: BulkCount) -> None:
        if self.json:
            print_json({**self._head(counted), "dry_run": True})
            return
        done = _DONE[self.action]
        sys.stdout.write(f"{_jobs(counted.count)} would be {done} in {self.where()}\n")
        _table(counted.sample)

    def result(self, counted: BulkCount, changed: int, skipped: list[StateChange]) -> None:
        if self.json:
            body = {
                **self._head(counted),
                "dry_run": False,
                "changed": changed,
                "skipped": len(skipped),
                "skipped_sample": [_skip(change) for change in skipped[:SAMPLE]],
            }
            print_json(body)
            return
        if counted.count == 0:
            sys.stdout.write(f"no jobs match in {self.where()}: none {_DONE[self.action]}\n")
            return
        sys.stdout.write(f"{_DONE[self.action]} {_jobs(changed)} in {self.where()}\n")
        if skipped:
            sys.stdout.write(f"{_jobs(len(skipped))} left as they were:\n")
            for change in skipped[:SAMPLE]:
                sys.stdout.write(f"  job {change.id}: {escape(change.reason)}\n")

    def _head(self, counted: BulkCount) -> dict[str, Any]:
        return {
            "action": self.action,
            "tenant": self.tenant,
            "database": self.database,
            "matched": counted.count,
            "sample": [_sampled(record) for record in counted.sample],
        }


async def _count(
    url: str, args: argparse.Namespace, action: BulkAction, known: selection.Declared | None
) -> tuple[JobFilter, BulkCount]:
    store = await _open(url)
    try:
        job_filter = await selection_of(
            store,
            action,
            states=[s for group in args.state or [] for s in group],
            queues=args.queue or (),
            names=args.job or (),
            tags=args.tag or (),
            older_than=args.older_than,
        )
        await selection.refuse_undeclared(
            store, known, queues=job_filter.queues, names=job_filter.names
        )
        return job_filter, await count_bulk(store, job_filter, SAMPLE)
    finally:
        await store.close()


async def _apply(
    args: argparse.Namespace, url: str, job_filter: JobFilter, counted: BulkCount, target: Target
) -> tuple[int, list[StateChange]]:
    # with the tenant's control channel: the retried jobs wake the workers at once
    store = await _open(url, await open_tenant_store(args.database_url, target.tenant, url))

    def progress(changed: int) -> None:
        if not target.json:  # progress, where a pipe reading the result does not see it
            sys.stderr.write(f"{_DONE[target.action]} {changed} so far\n")

    try:
        outcome = await apply_bulk(
            store, job_filter, counted, cli_actor(), tenant=target.tenant, progress=progress
        )
    finally:
        await store.close()
    return outcome.changed, list(outcome.skipped)


async def _open(url: str, store: SqlStore | None = None) -> SqlStore:
    """The store on `url` (or `store`, opened already), if it can act by filter."""
    store = store or await open_store(url)
    if not isinstance(store, BulkStore):
        await store.close()
        raise KetError("this store cannot retry or cancel jobs by filter")
    return store


def cli_actor() -> Actor:
    """The operator at this terminal, for the audit log: `user@host`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's user, say)
        user = f"uid {os.getuid()}"
    return Actor(subject=f"{user}@{socket.gethostname()}", source="cli")


def _confirmed(target: Target, counted: BulkCount) -> bool:
    """Ask on the terminal; refuse at once when there is none to ask on."""
    question = f"{target.action.capitalize()} {_jobs(counted.count)} in {target.where()}?"
    if not sys.stdin.isatty():
        sys.stderr.write(
            f"ket: error: not asking on a terminal ({question}): standard input is not one; "
            "pass --yes to go ahead, or --dry-run to see the jobs; nothing was changed\n"
        )
        return False
    _table(counted.sample, stream=sys.stderr)
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    sys.stderr.write("ket: nothing was changed\n")
    return False


def _states_of(action: BulkAction) -> Callable[[str], list[JobState]]:
    allowed = _STATES[action]

    def states(text: str) -> list[JobState]:
        found: list[JobState] = []
        for part in text.split(","):
            name = part.strip()
            state = next((s for s in allowed if s == name), None)
            if state is None:
                raise argparse.ArgumentTypeError(
                    f"{action} applies to jobs in states {', '.join(allowed)}; got {escape(name)!r}"
                )
            found.append(state)
        return found

    return states


def refuse_with_id(args: argparse.Namespace) -> None:
    """A job id takes none of the filter form's options."""
    given = [f"--{name.replace('_', '-')}" for name in _BULK_ONLY if getattr(args, name)]
    if given:
        raise KetError(
            f"job {args.id}: an id takes none of {', '.join(given)}; give an id or filters"
        )


def _table(sample: tuple[JobRecord, ...], *, stream: Any = None) -> None:
    out = stream or sys.stdout
    if not sample:
        return
    rows = [("ID", "JOB", "STATE", "QUEUE", "ENQUEUED AT")]
    for r in sample:
        cells = (str(r.id), r.name, r.state, r.queue, r.enqueued_at.isoformat(timespec="seconds"))
        rows.append(tuple(escape(cell) for cell in cells))  # type: ignore[arg-type]
    write_table(rows, out)


def _sampled(record: JobRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "name": record.name,
        "state": record.state,
        "queue": record.queue,
        "enqueued_at": record.enqueued_at.isoformat(),
    }


def _skip(change: StateChange) -> dict[str, Any]:
    return {"id": change.id, "state": change.state, "reason": change.reason}


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
