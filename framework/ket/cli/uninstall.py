"""`ket uninstall`: remove ket's tables from a tenant database, after a confirmation naming it.

It drops every job, its history, the schedules' state and fire ledger, the sent ledger, the
audit log and the migration ledger, and the workers' roster (`ket_workers` and its ledger) that
a single-tenant app keeps in the same database; the app's model tables are its data and stay.
With a tenant registry the roster is in the registry's database, shared by every tenant: it
stays. Stop the workers first.
Exit codes: 0 removed (or nothing to remove), 1 not confirmed, 2 bad input or no terminal to ask
on without --yes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from ket.cli.output import escape, print_json
from ket.cli.runtime import open_store, registry_reader, single_tenant
from ket.connection.database_file import sqlite_file_missing
from ket.connection.database_url import database_identity, shown_url
from ket.errors import KetError


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "uninstall",
        parents=parents,
        help="remove ket's tables from a tenant database",
        description=__doc__,
    )
    parser.add_argument(
        "--yes", action="store_true", help="do not ask: the database is named on the command line"
    )
    parser.add_argument("--format", choices=["text", "json"], default="text")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    tenant, url = single_tenant(args)
    where = f"tenant {tenant} ({shown_url(url)})"
    if not args.yes:
        if not sys.stdin.isatty():
            raise KetError(
                f"ket uninstall would drop every job of {where}; there is no terminal to ask "
                "on: pass --yes to confirm"
            )
        sys.stderr.write(
            f"Remove ket's tables from {escape(where)}? Every job, its history, the schedules' "
            f"state and the sent ledger are lost (the app's model tables stay). Type the tenant "
            f"name, {escape(tenant)}, to confirm: "
        )
        sys.stderr.flush()
        if sys.stdin.readline().strip() != tenant:
            sys.stderr.write("not confirmed: nothing removed\n")
            return 1
    dropped = asyncio.run(_uninstall(url, control=not _is_registry(args.database_url, url)))
    if args.format == "json":
        shown = {"tenant": tenant, "database": shown_url(url), "removed": dropped}
        print_json(shown)
        return 0
    if dropped:
        sys.stdout.write(f"{escape(where)}: removed {', '.join(dropped)}\n")
    else:
        sys.stdout.write(f"{escape(where)}: no ket tables to remove\n")
    return 0


async def _uninstall(url: str, *, control: bool) -> list[str]:
    if sqlite_file_missing(url):  # nothing was installed; opening it would make the file
        return []
    store = await open_store(url)
    try:
        return await store.uninstall(control=control)
    finally:
        await store.close()


def _is_registry(database_url: str | None, url: str) -> bool:
    """Whether the tenant's database `url` is also the tenant registry's: the control tables
    there are where the workers of every tenant meet, not this tenant's to drop. (Without a
    registry the single tenant's database is the control database, and its roster goes.)"""
    registry = registry_reader(database_url)
    try:
        exists = registry.exists()
    finally:
        registry.close()
    return exists and database_identity(registry.url) == database_identity(url)
