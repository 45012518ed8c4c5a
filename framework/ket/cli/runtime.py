"""What the running commands share: database options, the registry, opening tenant stores."""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from typing import Any

from ket.errors import KetError
from ket.runtime.tenancy import (
    DEFAULT_TENANT,
    database_template,
    ensure_sqlite_folder,
    registry_url,
    tenant_database,
)
from ket.store.sql import SqlStore
from ket.store.sql.registry import TenantRegistry


def database_parent() -> argparse.ArgumentParser:
    """--database-url and --tenant, for the commands that reach tenant databases."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("databases")
    group.add_argument(
        "--database-url",
        metavar="URL",
        help="tenant database URL, may contain {tenant} (default: KET_DATABASE_URL, else "
        "sqlite:///.ket/{tenant}.db)",
    )
    group.add_argument("--tenant", metavar="NAME", help="only this tenant")
    return parent


def open_registry() -> TenantRegistry:
    url = registry_url()
    ensure_sqlite_folder(url)
    return TenantRegistry(url)


def tenant_urls(args: argparse.Namespace) -> dict[str, str]:
    """Tenant name -> database URL for the command line (one tenant with --tenant)."""
    registry = open_registry()
    try:
        registered = {t.name: t.database_url for t in registry.list()}
    finally:
        registry.close()
    template = database_template(args.database_url)
    if args.tenant is not None:
        if registered and args.tenant not in registered:
            raise KetError(
                f"tenant {args.tenant!r} is not registered (tenants: {', '.join(registered)})"
            )
        registered = {args.tenant: registered.get(args.tenant)}
    if not registered:
        registered = {DEFAULT_TENANT: None}
    count = len(registered)
    return {
        name: url or tenant_database(template, name, tenants=count)
        for name, url in registered.items()
    }


def single_tenant(args: argparse.Namespace) -> tuple[str, str]:
    """The one tenant a command acts on: --tenant, or the app's only one."""
    urls = tenant_urls(args)
    if len(urls) > 1:
        raise KetError(
            f"this app has several tenants ({', '.join(urls)}); choose one with --tenant"
        )
    [(name, url)] = urls.items()
    return name, url


async def open_store(url: str, *, pool_size: int = 5, **engine_options: Any) -> SqlStore:
    """A store on a tenant database (not yet migrated: `ket migrate` does that)."""
    ensure_sqlite_folder(url)
    return await SqlStore.open(url, pool_size=pool_size, **engine_options)


def worker_id() -> str:
    """host:pid:random, unique per worker process and readable in `ket jobs show`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
