"""`ket dev`: run the app locally on the embedded default, with nothing else installed.

Migrates the tenant databases (an embedded SQLite file under `.ket/` unless KET_DATABASE_URL says
otherwise), then runs the worker with readable logs until Ctrl-C. `--all` runs the HTTP server of
`ket serve` beside it, in the same process (--host, --port): if either stops unexpectedly, the
other is stopped and `ket dev` exits 1. `--call NAME JSON` calls a function once the worker is
running, e.g. to place a first order and watch its jobs run. --queues QUEUE,... (or
KET_WORKER_QUEUES) and --concurrency QUEUE=N (or KET_WORKER_CONCURRENCY) choose the queues the
worker serves and their concurrency as for `ket worker`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from ket.catalog import Catalog
from ket.cli import concurrency
from ket.cli.call import call_on_tenant, parse_input, validate_call
from ket.cli.concurrency import HostConcurrency
from ket.cli.migrate import migrate_all
from ket.cli.options import add_log_options, deployment_of, log_format, log_third_party
from ket.cli.output import clip, configure_logging, escape
from ket.cli.runtime import run_service, single_tenant, tenant_urls
from ket.cli.serve import (
    add_http_options,
    announce_dashboard,
    check_servable,
    http_server,
    listen_for,
)
from ket.cli.worker import Stopping, add_budget_option, connection_budget, serve
from ket.declare.deployment import DeploymentDecl
from ket.errors import KetError
from ket.runtime.call import redactor
from ket.runtime.contexts import default_blobs
from ket.runtime.outcome import describe
from ket.storage import BlobStore

log = logging.getLogger("ket.dev")


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "dev",
        parents=parents,
        help="migrate and run the app locally (embedded SQLite by default)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--all", action="store_true", help="run the HTTP server of `ket serve` beside the worker"
    )
    parser.add_argument(
        "--call",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "JSON"),
        help="call a function once the worker runs (repeatable)",
    )
    concurrency.add_options(parser)
    add_log_options(parser)
    add_http_options(parser)
    add_budget_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(
        args.log_level,
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        log_format=log_format(args, os.environ),
        third_party=log_third_party(os.environ),
    )
    logging.getLogger("ket.jobs").setLevel(min(logging.DEBUG, logging.getLevelName(args.log_level)))
    settings = concurrency.read(args.concurrency, os.environ, queues=args.queues)
    deployment = deployment_of(args)
    catalog = Catalog.build(deployment)  # the server and the dashboard see every queue
    settings.apply(catalog)  # an unknown queue, or none left, is refused before migrating
    calls = [(name, parse_input(text)) for name, text in args.call]
    for name, payload in calls:  # an unknown name or refused input stops the start (2)
        try:
            validate_call(catalog, name, payload)
        except KetError as error:
            raise KetError(f"--call: {error}") from None
    if args.all:
        check_servable(catalog, "ket dev --all")
    urls = tenant_urls(args)
    if calls:
        urls = dict([single_tenant(args)])  # --call needs one tenant
    # one budget over the worker's connections and the HTTP server's, as `ket serve` has
    args.max_connections = connection_budget(args.max_connections, os.environ)
    sock = listen_for(args) if args.all else None  # a port in use stops the start here
    blobs = default_blobs()  # a bad KET_STORAGE_URL stops the start, naming it
    asyncio.run(migrate_all(catalog, urls))
    return run_service(_dev(catalog, args, settings, urls, calls, sock, deployment, blobs))


async def _dev(
    catalog: Catalog,
    args: argparse.Namespace,
    settings: HostConcurrency,
    urls: dict[str, str],
    calls: list[tuple[str, dict[str, object]]],
    sock: socket.socket | None,
    deployment: DeploymentDecl,
    blobs: BlobStore,
) -> int:
    stopping = Stopping()
    stopping.install()
    serving = asyncio.ensure_future(
        serve(
            catalog,
            args.database_url,
            args.tenant,
            settings,
            stopping,
            deployment,
            blobs,
            max_connections=args.max_connections,
        )
    )
    if sock is not None:
        from ket.serve.server import address

        server = http_server(catalog, args, sock, blobs)
        stopping.also(server.stop)
        http = asyncio.ensure_future(_stopped_saying_so(server.run()))
        log.info("serving the functions over HTTP on %s", address(sock))
        announce_dashboard(catalog, address(sock))
        serving = asyncio.ensure_future(_both(serving, http, stopping, server.stop))
    if calls:
        await asyncio.sleep(0.5)
        [(name, url)] = urls.items()
        try:
            for (function, _), result in zip(
                calls, await call_on_tenant(catalog, name, url, calls, blobs), strict=True
            ):
                log.info("called %s: %s", function, result)
        except Exception as error:  # a failing demo call must not stop the worker
            failure = clip(describe(error, redactor(catalog, calls)))
            sys.stderr.write(f"ket dev: calling failed: {escape(failure)}\n")
    return await serving


async def _stopped_saying_so(run: Coroutine[Any, Any, int]) -> int:
    """Run the HTTP server and log its end: uvicorn's own lines are quiet at INFO (see
    ket/observe/logs.py), so ket says it."""
    try:
        return await run
    finally:
        log.info("HTTP server stopped")


async def _both(
    worker: asyncio.Future[int],
    http: asyncio.Future[int],
    stopping: Stopping,
    stop_http: Callable[[], None],
) -> int:
    """Run the worker and the HTTP server until both stop; if one stops before a signal asked
    it to, say so, stop the other and exit 1."""
    done, _ = await asyncio.wait({worker, http}, return_when=asyncio.FIRST_COMPLETED)
    unexpected = not stopping.event.is_set()
    if unexpected:
        which = "the worker" if worker in done else "the HTTP server"
        other = "the HTTP server" if worker in done else "the worker"
        failure = next(iter(done)).exception()
        log.error(
            "%s stopped unexpectedly (%s); stopping %s",
            which,
            "it raised " + describe(failure) if failure else "it returned",
            other,
        )
        stopping.event.set()
        stop_http()
    codes = []
    for task in (worker, http):
        try:
            codes.append(await task)
        except Exception:
            codes.append(1)
    return 1 if unexpected else max(codes)
