"""What the running commands share: database options, the registry, opening tenant stores.

The SQL store is imported by the functions that open a database, never at the top of a CLI
module, so `ket check`, `ket manifest` and `ket diff` start without it; and reading the tenant
registry (every command, and the worker's refresh) takes no SQLAlchemy, which a worker on
PostgreSQL then never imports unless its handlers need it (ket.store.sql.store).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from ket.connection.url import is_postgres
from ket.errors import KetError
from ket.store.tenant import check_tenant_name

T = TypeVar("T")

if TYPE_CHECKING:
    from ket.catalog import Catalog
    from ket.control.registry import TenantRegistry
    from ket.control.registry_reader import RegistryReader
    from ket.runtime.tenancy import Tenancy
    from ket.store.sql import SqlStore
    from ket.wakeup.control_channel import ControlChannels


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
    group.add_argument("--tenant", metavar="NAME", type=tenant_name, help="only this tenant")
    return parent


def registry_parent() -> argparse.ArgumentParser:
    """--database-url alone, for the commands that read the registry or the control database
    but act on no tenant's jobs (on PostgreSQL it says where ket's default registry is)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("databases")
    group.add_argument(
        "--database-url",
        metavar="URL",
        help="tenant database URL, may contain {tenant} (default: KET_DATABASE_URL, else "
        "sqlite:///.ket/{tenant}.db); on PostgreSQL the registry defaults to the database "
        "ket_registry on its server",
    )
    return parent


def tenant_name(text: str) -> str:
    """An argparse type: a name in the tenant grammar, else a usage error naming it."""
    try:
        return check_tenant_name(text)
    except KetError as error:
        raise argparse.ArgumentTypeError(error.message) from None


def open_registry(database_url: str | None) -> TenantRegistry:
    """The tenant registry, to change it (created if missing: on PostgreSQL, its database too
    when ket chose it). `database_url` is the --database-url option, which says where ket's
    default registry is."""
    from ket.control.registry import TenantRegistry
    from ket.runtime.tenancy import ensure_sqlite_folder, registry_configured, registry_url

    url = registry_url(database_url)
    ensure_sqlite_folder(url)
    if not registry_configured():
        from ket.control.tenant_database import create_registry_database

        asyncio.run(create_registry_database(url))
    return TenantRegistry(url)


def registry_reader(database_url: str | None) -> RegistryReader:
    """The tenant registry, to list its tenants (a missing one lists none); `database_url` is
    the --database-url option."""
    from ket.control.registry_reader import RegistryReader
    from ket.runtime.tenancy import registry_url

    return RegistryReader(registry_url(database_url))


def control_url(database_url: str | None) -> str:
    """The control database (where the workers record themselves): the registry's once it
    exists, else the single tenant's; `database_url` is the --database-url option."""
    from ket.runtime.tenancy import control_url as control
    from ket.runtime.tenancy import database_template

    registry = registry_reader(database_url)
    try:
        exists = registry.exists()
    finally:
        registry.close()
    return control(database_template(database_url), registry.url, registry_exists=exists)


def tenancy(args: argparse.Namespace) -> Tenancy:
    """The registered tenants and their databases, for --tenant or every tenant."""
    from ket.runtime.tenancy import database_template, resolve_tenants

    registry = registry_reader(args.database_url)
    try:
        registered = registry.databases()
    finally:
        registry.close()
    return resolve_tenants(registered, database_template(args.database_url), only=args.tenant)


def tenant_urls(args: argparse.Namespace) -> dict[str, str]:
    """Tenant name -> database URL for the command line (one tenant with --tenant).

    A tenant that cannot be served (it shares a database with another, say) is an error when
    it was chosen with --tenant, and otherwise skipped with a warning, so the others are served.
    """
    return _usable(args, tenancy(args))


def single_tenant(args: argparse.Namespace) -> tuple[str, str]:
    """The one tenant a command acts on: --tenant, or the app's only one."""
    found = tenancy(args)
    if args.tenant is None and len(found.registered) > 1:
        raise KetError(
            f"this app has several tenants ({', '.join(found.registered)}); "
            "choose one with --tenant"
        )
    [(name, url)] = _usable(args, found).items()
    return name, url


def _usable(args: argparse.Namespace, found: Tenancy) -> dict[str, str]:
    if args.tenant is not None:
        return {args.tenant: found.url_of(args.tenant)}
    if not found.urls:
        raise KetError("no tenant can be used: " + "; ".join(found.refused.values()))
    for name, reason in found.refused.items():
        sys.stderr.write(f"ket: warning: skipping tenant {name!r}: {reason}\n")
    return found.urls


async def open_store(
    url: str, *, pool_size: int = 5, create: bool = False, **engine_options: Any
) -> SqlStore:
    """A store on a tenant database (not yet migrated: `ket migrate` does that). A SQLite file
    that does not exist is made only with `create` (the worker and the server, which go on
    waiting for `ket migrate`); without it the command is refused, saying to run `ket
    migrate`, and leaves no file behind."""
    from ket.connection.database_file import require_database
    from ket.runtime.tenancy import ensure_sqlite_folder
    from ket.store.sql import SqlStore

    if create:
        ensure_sqlite_folder(url)
    else:
        require_database(url)
    return await SqlStore.open(url, pool_size=pool_size, **engine_options)


async def open_tenant_store(database_url: str | None, tenant: str, url: str) -> SqlStore:
    """open_store for a command that writes `tenant`'s jobs (retry, rerun, bulk, run now, a
    called function's enqueue): with the tenant's part in the control channel when the
    registry lists tenants on PostgreSQL, so what it makes runnable wakes the workers, which
    listen there (SqlStore._available; without it they waited for their safety visit)."""
    from ket.runtime.tenancy import registry_url
    from ket.wakeup.control_channel import ControlChannel, control_dsn

    registry = registry_reader(database_url)
    try:
        registered = await asyncio.to_thread(registry.databases)
    finally:
        registry.close()
    dsn = control_dsn(url, registry_url(database_url), registered=bool(registered))
    if dsn is None:
        return await open_store(url)
    return await open_store(url, channel=ControlChannel(dsn, tenant))


def control_channels(registry: str) -> ControlChannels | None:
    """The control channel on the registry's database when it is on PostgreSQL (used once the
    registry lists tenants), for the long-running commands that serve tenants; None for
    SQLite."""
    if not is_postgres(registry):
        return None
    from ket.connection.address import libpq_dsn, parse_url
    from ket.wakeup.control_channel import ControlChannels

    return ControlChannels(libpq_dsn(parse_url(registry)))


def on_tenant_store(
    args: argparse.Namespace, action: Callable[[SqlStore, Catalog, str], Awaitable[T]]
) -> T:
    """Run `action(store, catalog, tenant)` on the one tenant the command acts on (--tenant,
    or the app's only one), with the deployment's catalog; the store has the tenant's part in
    the control channel, so what the action makes runnable wakes the workers at once."""
    from ket.catalog import Catalog
    from ket.cli.options import deployment_of

    catalog = Catalog.build(deployment_of(args))
    tenant, url = single_tenant(args)

    async def run() -> T:
        store = await open_tenant_store(args.database_url, tenant, url)
        try:
            return await action(store, catalog, tenant)
        finally:
            await store.close()

    return asyncio.run(run())


async def creating_store(url: str, **options: Any) -> SqlStore:
    """open_store(url, create=True): for the long-running commands that serve tenants."""
    return await open_store(url, create=True, **options)


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a long-lived command's event loop: uvloop's when it is installed (`ket-jobs[speed]`),
    which halves the loop's own cost per job; asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def worker_id() -> str:
    """host:pid:random, unique per worker process and readable in `ket jobs show`."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
