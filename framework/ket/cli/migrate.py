"""`ket migrate`: install or upgrade ket's tables and the app's model tables in every tenant."""

from __future__ import annotations

import argparse
import asyncio
import sys

from ket.catalog import Catalog
from ket.cli.options import deployment_of
from ket.cli.runtime import tenant_urls
from ket.runtime.tenancy import ensure_sqlite_folder


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "migrate",
        parents=parents,
        help="install or upgrade the schema of every tenant database",
        description="Install or upgrade ket's tables and the deployment's model tables in "
        "every tenant database (or --tenant NAME). Safe to run again.",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    catalog = Catalog.build(deployment_of(args))
    urls = tenant_urls(args)
    asyncio.run(migrate_all(catalog, urls))
    return 0


async def migrate_all(catalog: Catalog, urls: dict[str, str]) -> None:
    """Migrate every tenant database in `urls`, printing one line per tenant."""
    from ket.runtime.contexts import install_models
    from ket.store.sql import SqlStore

    for name, url in urls.items():
        ensure_sqlite_folder(url)
        store = await SqlStore.open(url)
        try:
            applied = await store.migrate()
            await install_models(store, catalog)
        finally:
            await store.close()
        done = f"applied migrations {applied}" if applied else "up to date"
        sys.stdout.write(f"tenant {name}: {done}\n")
