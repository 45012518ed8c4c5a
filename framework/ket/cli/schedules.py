"""`ket schedules list/pause/resume/run-now`: the deployment's schedules in one tenant.

Exit codes: 0 done, 2 bad input (an unknown schedule, unknown tenant, bad option).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from ket.catalog import Catalog
from ket.cli.bulk import cli_actor
from ket.cli.output import escape, print_json
from ket.cli.runtime import on_tenant_store
from ket.operate import ScheduleRow, pause_schedule, run_schedule_now, schedule_rows

if TYPE_CHECKING:
    from ket.store.sql import SqlStore

T = TypeVar("T")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "schedules", help="see, pause, resume and fire schedules", description=__doc__
    )
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", parents=parents, help="each schedule: last and next tick, skips, paused"
    )
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_list)
    for name, helptext, run in (
        ("pause", "stop firing a schedule's ticks, on every replica", _pause),
        ("resume", "fire a paused schedule's ticks again", _resume),
        ("run-now", "fire a schedule once, now, as a tick would", _run_now),
    ):
        action = actions.add_parser(name, parents=parents, help=helptext)
        action.add_argument("name", metavar="JOB", help="the scheduled job, e.g. hotel.night_audit")
        action.add_argument("--format", choices=["text", "json"], default="text")
        action.set_defaults(run=run)


def row_json(row: ScheduleRow) -> dict[str, Any]:
    """One schedule as `ket schedules list --format json` shows it."""
    fire = row.last_fire
    return {
        "job": row.job,
        "schedule": row.schedule,
        "paused": row.paused,
        "installed": row.installed,
        "last_tick": _iso(row.last_tick),
        "next_tick": _iso(row.next_tick),
        "last_fire": None
        if fire is None
        else {
            "tick": _iso(fire.tick),
            "skipped": fire.skipped,
            "job_id": fire.job_id,
            "fired_at": _iso(fire.fired_at),
        },
        "ticks_waiting": row.ticks_waiting,
    }


async def _rows(store: SqlStore, catalog: Catalog, tenant: str) -> list[ScheduleRow]:
    return await schedule_rows(store, catalog)


def _list(args: argparse.Namespace) -> int:
    found = [row_json(row) for row in on_tenant_store(args, _rows)]
    if args.format == "json":
        print_json(found)
        return 0
    if not found:
        sys.stdout.write("no schedules\n")
        return 0
    for row in found:
        state = "active" if row["installed"] else "not installed yet (the first sweep does)"
        if row["paused"]:
            state = "paused"
        fire = row["last_fire"]
        last = (
            "never fired"
            if fire is None
            else (
                f"last fired {fire['fired_at']} for {fire['tick']} (job {fire['job_id']}, "
                f"{fire['skipped']} skipped)"
            )
        )
        waiting = f"; {row['ticks_waiting']} ticks passed while paused" if row["paused"] else ""
        sys.stdout.write(
            f"{escape(row['job'])}  {escape(row['schedule'])}  {state}\n"
            f"  {last}; next tick {row['next_tick']}{waiting}\n"
        )
    return 0


def _pause(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=True)


def _resume(args: argparse.Namespace) -> int:
    return _set_paused(args, paused=False)


def _set_paused(args: argparse.Namespace, *, paused: bool) -> int:
    async def act(store: SqlStore, catalog: Catalog, tenant: str) -> bool:
        return await pause_schedule(
            store, catalog, args.name, cli_actor(), tenant=tenant, paused=paused
        )

    changed = on_tenant_store(args, act)
    word = "paused" if paused else "resumed"
    if args.format == "json":
        print_json({"job": args.name, "paused": paused, "changed": changed})
        return 0
    if changed:
        sys.stdout.write(f"schedule {escape(args.name)} {word}\n")
    else:
        sys.stdout.write(f"schedule {escape(args.name)} was already {word}\n")
    return 0


def _run_now(args: argparse.Namespace) -> int:
    async def act(store: SqlStore, catalog: Catalog, tenant: str) -> int:
        return (await run_schedule_now(store, catalog, args.name, cli_actor(), tenant=tenant)).id

    job_id = on_tenant_store(args, act)
    if args.format == "json":
        print_json({"job": args.name, "job_id": job_id})
        return 0
    sys.stdout.write(f"schedule {escape(args.name)} fired now: job {job_id}\n")
    return 0


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()
