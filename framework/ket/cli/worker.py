"""`ket worker`: run the deployment's jobs for every tenant (or one) until told to stop.

SIGTERM or SIGINT stops claiming, lets running jobs finish within `shutdown_grace_ms`, aborts
the rest (reason `shutdown`) and hands them back, then exits 0. A second signal hands back what
it can within half a second and exits within a second, whatever handler threads are doing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import threading

from ket.catalog import Catalog
from ket.cli.options import deployment_of
from ket.cli.runtime import open_registry, open_store, tenant_urls, worker_id
from ket.runtime.contexts import default_sender
from ket.runtime.fleet import Fleet
from ket.runtime.tenancy import database_template
from ket.runtime.worker import connections_needed
from ket.store.contract import JobStore

log = logging.getLogger("ket.worker")

# The second signal: how long handing back may take, and when the process is gone regardless.
HAND_BACK_SECONDS = 0.5
EXIT_SECONDS = 0.9


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
    fleet: Fleet | None = None

    def on_signal(number: int) -> None:
        if stop.is_set():
            sys.stderr.write("ket worker: second signal: handing back running jobs and exiting\n")
            # a stuck handler thread or a hung database call must not keep the process alive
            threading.Timer(EXIT_SECONDS, os._exit, (1,)).start()
            if fleet is not None:
                task = loop.create_task(fleet.hand_back_now(HAND_BACK_SECONDS))
                task.add_done_callback(lambda _: os._exit(1))
            return
        log.info("received %s: finishing running jobs, then stopping", signal.Signals(number).name)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal, number)
    registry = open_registry()

    async def list_tenants() -> dict[str, str | None]:
        tenants = await asyncio.to_thread(registry.list)
        return {t.name: t.database_url for t in tenants}

    pool = connections_needed(catalog.worker)

    async def open_tenant(url: str) -> JobStore:
        return await open_store(url, pool_size=pool)

    identity = worker_id()
    fleet = Fleet(
        catalog=catalog,
        template=database_template(database_url),
        list_tenants=list_tenants,
        open_store=open_tenant,
        worker_id=identity,
        sender=default_sender(),
        only=tenant,
    )
    log.info(
        "worker %s serving deployment %s (up to %d database connections per tenant)",
        identity,
        catalog.deployment,
        pool,
    )
    try:
        await fleet.run(stop)
    finally:
        registry.close()
    stuck = [t.name for t in threading.enumerate() if t.name.startswith("ket-") and t.is_alive()]
    if stuck:
        # handler threads that ignored their abort: their jobs were handed back and their
        # effects are refused, and the interpreter would wait for them forever at exit
        log.warning("exiting with %d handler threads still running: %s", len(stuck), stuck)
        logging.shutdown()
        os._exit(0)
    log.info("worker stopped")
    return 0
