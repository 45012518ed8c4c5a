"""`ket tenants add/list/remove`: the registry of tenants and their databases.

While no tenant is registered the app runs as one tenant, `default`. Adding the first tenant
keeps that one running: when `default`'s database holds ket's tables (`ket migrate` ran there),
`default` is registered too, on the database it ran on, as in Oban, where an instance started on
a new prefix leaves the `public` prefix's jobs running (docs/operations.md, From one tenant to
many).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ket.cli.output import escape
from ket.cli.runtime import open_registry, registry_parent, registry_reader, tenant_name
from ket.connection.database_file import sqlite_path
from ket.connection.database_url import PLACEHOLDER, database_identity, shown_url
from ket.connection.url import is_sqlite
from ket.errors import KetError, StoreError
from ket.runtime.tenancy import (
    DEFAULT_TENANT,
    database_template,
    single_tenant_database,
    tenant_database,
)

if TYPE_CHECKING:
    from ket.control.registry import Tenant


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser("tenants", help="add, list or remove tenants", description=__doc__)
    actions = parser.add_subparsers(title="actions", metavar="ACTION", required=True)
    add = actions.add_parser(
        "add",
        parents=parents,
        help="register a tenant and create its database where possible",
        description="Register a tenant and create its database where possible. The first "
        "tenant of an app that ran as the single tenant 'default' registers 'default' too, on "
        "the database it ran on, so that its jobs keep running.",
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
    single = _single_tenant(args, template)
    carried = _carried(name, template, single)
    url = own if own is not None else _new_database(template, name, carried)
    registry = open_registry(args.database_url)
    try:
        # every refusal (a shared database, say) comes before a database is created
        registry.check_new(name, own, template=template, carried=carried)
        from ket.control.tenant_database import create_database

        created = asyncio.run(create_database(url))
        added = registry.add(name, own, template=template, carried=carried)
    finally:
        registry.close()
    if is_sqlite(url):
        note = "its database file is created by ket migrate"
    else:
        note = "created its database" if created else "its database exists"
    sys.stdout.write(f"tenant {name} added ({note}); run `ket migrate --tenant {name}` next\n")
    if single is not None and carried in added:
        sys.stdout.write(
            f"registered tenant {DEFAULT_TENANT!r} too: it holds the jobs of this project "
            f"before it had tenants ({_where(single)})\n"
        )
    elif single is not None and name == DEFAULT_TENANT and own is not None:
        _warn_if_moved(own, single)
    return 0


def _single_tenant(args: argparse.Namespace, template: str) -> str | None:
    """The database the app's single tenant, `default`, runs on when no tenant is registered
    and `ket migrate` installed ket there (it may hold jobs); else None, and None too when
    `default` itself is being added on the template's database (there is nothing to ask)."""
    if args.name == DEFAULT_TENANT and args.tenant_database_url is None:
        return None
    reader = registry_reader(args.database_url)
    try:
        if reader.databases():
            return None  # only the registered tenants are served: `default` is one or none
    finally:
        reader.close()
    url = single_tenant_database(template)
    if url is None:
        return None
    from ket.control.tenant_database import schema_installed

    try:
        return url if asyncio.run(schema_installed(url)) else None
    except StoreError as error:
        if args.name == DEFAULT_TENANT:
            return None  # asked only to warn of a move: registering `default` loses nothing
        # not knowing must not lose its jobs: refuse, rather than add the tenant without it
        raise KetError(
            f"cannot tell whether tenant {DEFAULT_TENANT!r}, this project's single tenant so "
            f"far, has jobs to keep: {error.message}; run this again once its database "
            f"answers, or register it first (`ket tenants add {DEFAULT_TENANT}`)"
        ) from None


def _carried(name: str, template: str, single: str | None) -> Tenant | None:
    """`default` to register with `name`, the first tenant, when it has a database: without
    `{tenant}` in the template it is registered with its URL, as the template can no longer
    stand for several tenants."""
    if single is None or name == DEFAULT_TENANT:
        return None
    from ket.control.registry import Tenant

    return Tenant(name=DEFAULT_TENANT, database_url=None if PLACEHOLDER in template else single)


def _new_database(template: str, name: str, carried: Tenant | None) -> str:
    """The new tenant's database from the template: refused without `{tenant}` in it."""
    if carried is not None and PLACEHOLDER not in template:
        # the usual advice, put {tenant} in the URL, would move `default` off its jobs
        raise KetError(
            f"database URL {shown_url(template)!r} has no {{tenant}}: it is the database of "
            f"tenant {DEFAULT_TENANT!r}, which holds this project's jobs, and every tenant "
            f"would share it; give {name!r} a database of its own (`ket tenants add {name} "
            f"--tenant-database-url URL`), and {DEFAULT_TENANT!r} is registered with this one"
        )
    return tenant_database(template, name, tenants=2)


def _warn_if_moved(own: str, single: str) -> None:
    """`default` registered with a database other than the one it ran on: not silently."""
    with contextlib.suppress(StoreError):  # a URL the registry took but cannot compare
        if database_identity(own) == database_identity(single):
            return
    sys.stderr.write(
        f"ket: warning: tenant {DEFAULT_TENANT!r} ran on {_where(single)} until now; the jobs "
        f"there stay there, and it now runs on {shown_url(own)}\n"
    )


def _where(url: str) -> str:
    """A database as printed: a SQLite file below the current folder by its relative path."""
    path = sqlite_path(url)
    if path is not None:
        with contextlib.suppress(ValueError):  # elsewhere: its URL
            return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    return shown_url(url)


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
    removed, left = False, True
    if reader.exists():  # nothing to remove from a registry that is not there: not made for it
        registry = open_registry(args.database_url)
        try:
            removed = registry.remove(args.name)
            left = bool(registry.list())
        finally:
            registry.close()
    if not removed:
        sys.stderr.write(f"ket: error: tenant {args.name!r} is not registered\n")
        return 2
    sys.stdout.write(f"tenant {escape(args.name)} removed (its database was left in place)\n")
    if not left:
        # an empty registry is a single-tenant app again: say so, and where that tenant is
        where = single_tenant_database(database_template(args.database_url))
        shown = f" ({_where(where)})" if where is not None else ""
        sys.stdout.write(
            f"no tenant is registered now: the app runs as the single tenant "
            f"{DEFAULT_TENANT!r} again{shown}\n"
        )
    return 0
