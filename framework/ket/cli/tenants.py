"""`ket tenants add/list/remove`: the registry of tenants and their databases."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from ket.cli.output import escape
from ket.cli.runtime import open_registry, registry_parent, registry_reader, tenant_name
from ket.runtime.tenancy import database_template, tenant_database
from ket.store.database_url import shown_url


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser("tenants", help="add, list or remove tenants", description=__doc__)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add", parents=parents, help="register a tenant and create its database where possible"
    )
    add.add_argument("name", type=tenant_name)
    add.add_argument(
        "--tenant-database-url",
        metavar="URL",
        help="this tenant's own database (default: the {tenant} template)",
    )
    add.set_defaults(run=_add)
    listing = actions.add_parser(
        "list", parents=[registry_parent()], help="list the registered tenants"
    )
    listing.add_argument("--format", choices=["text", "json"], default="text")
    listing.set_defaults(run=_list)
    remove = actions.add_parser(
        "remove", parents=[registry_parent()], help="unregister a tenant (its database is kept)"
    )
    remove.add_argument("name")
    remove.set_defaults(run=_remove)


def _add(args: argparse.Namespace) -> int:
    name, own = args.name, args.tenant_database_url
    template = database_template(args.database_url)
    url = own if own is not None else tenant_database(template, name, tenants=2)
    registry = open_registry(args.database_url)
    try:
        # every refusal (a shared database, say) comes before a database is created
        registry.check_new(name, own, template=template)
        from ket.store.sql.tenant_database import create_database

        created = asyncio.run(create_database(url))
        registry.add(name, own, template=template)
    finally:
        registry.close()
    if url.startswith("sqlite"):
        note = "its database file is created by ket migrate"
    else:
        note = "created its database" if created else "its database exists"
    sys.stdout.write(f"tenant {name} added ({note}); run `ket migrate --tenant {name}` next\n")
    return 0


def _list(args: argparse.Namespace) -> int:
    # read, not opened to change: listing creates no registry (nor its database)
    registry = registry_reader(args.database_url)
    try:
        tenants = registry.databases()
    finally:
        registry.close()
    if args.format == "json":
        rows = [{"name": name, "database_url": _shown(url)} for name, url in tenants.items()]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    elif not tenants:
        sys.stdout.write("no tenants registered: the app runs as the single tenant 'default'\n")
    else:
        for name, url in tenants.items():
            where = _shown(url) or "(from the template)"
            # a row written by hand may hold anything: escaped, it cannot forge a line
            sys.stdout.write(f"{escape(name)}\t{escape(where)}\n")
    return 0


def _shown(url: str | None) -> str | None:
    return None if url is None else shown_url(url)


def _remove(args: argparse.Namespace) -> int:
    reader = registry_reader(args.database_url)
    removed = False
    if reader.exists():  # nothing to remove from a registry that is not there: not made for it
        registry = open_registry(args.database_url)
        try:
            removed = registry.remove(args.name)
        finally:
            registry.close()
    if not removed:
        sys.stderr.write(f"ket: error: tenant {args.name!r} is not registered\n")
        return 2
    sys.stdout.write(f"tenant {escape(args.name)} removed (its database was left in place)\n")
    return 0
