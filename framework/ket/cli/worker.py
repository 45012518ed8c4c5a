"""`ket worker`: run the deployment's jobs for every tenant (or one) until told to stop.

SIGTERM or SIGINT stops claiming, lets running jobs finish within `shutdown_grace_ms`, aborts
the rest (reason `shutdown`) and hands them back, then exits 0. A second signal exits at once;
the jobs still running are then rescued when their leases expire.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

from ket.catalog import Catalog
from ket.cli.options import deployment_of
from ket.cli.runtime import open_registry, open_store, tenant_urls, worker_id
from ket.runtime.contexts import default_sender
from ket.runtime.supervisor import Supervisor
from ket.runtime.tenancy import database_template

log = logging.getLogger("ket.worker")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "worker",
        parents=parents,
        help="run the jobs of every tenant (or --tenant NAME)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    catalog = Catalog.build(deployment_of(args))
    tenant_urls(args)  # an unknown --tenant is an error now, not a silent idle worker
    return asyncio.run(serve(catalog, args.database_url, args.tenant))


async def serve(catalog: Catalog, database_url: str | None, tenant: str | None) -> int:
    """Serve until a signal; returns the exit code."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(number: int) -> None:
        if stop.is_set():
            sys.stderr.write("ket worker: second signal, exiting now\n")
            os._exit(1)
        log.info("received %s: finishing running jobs, then stopping", signal.Signals(number).name)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal, number)
    registry = open_registry()

    async def list_tenants() -> dict[str, str | None]:
        tenants = await asyncio.to_thread(registry.list)
        return {t.name: t.database_url for t in tenants}

    slots = sum(catalog.worker.queues.values())
    identity = worker_id()
    with ThreadPoolExecutor(max_workers=min(256, slots * 4), thread_name_prefix="ket-job") as pool:
        supervisor = Supervisor(
            catalog=catalog,
            template=database_template(database_url),
            list_tenants=list_tenants,
            open_store=open_store,
            worker_id=identity,
            executor=pool,
            sender=default_sender(),
            only=tenant,
        )
        log.info("worker %s serving deployment %s", identity, catalog.deployment)
        try:
            await supervisor.run(stop)
        finally:
            registry.close()
    log.info("worker stopped")
    return 0
