"""`ket serve`: serve the deployment's functions over HTTP until told to stop.

POST /functions/<module>.<function> with the input as a JSON body calls the function, as
`ket call` does, for the tenant the X-Ket-Tenant header (or the host) names and the company of
the principal the deployment's authenticator returns; /openapi.json describes them. Without an
authenticator (`define_deployment(serve={"authenticate": ...})`) it refuses to start.

SIGTERM or SIGINT stops accepting connections, lets requests in flight finish within the
deployment's serve `shutdown_grace_ms`, closes the tenants' databases and exits 0; a second
signal stops at once.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import logging
import os
import signal
import socket
from typing import TYPE_CHECKING

from ket.catalog import Catalog
from ket.cli import metrics
from ket.cli.options import add_log_options, deployment_of, log_format, log_third_party
from ket.cli.output import configure_logging
from ket.cli.runtime import (
    control_channels,
    creating_store,
    registry_reader,
    run_service,
    tenant_urls,
)
from ket.cli.worker import add_budget_option, connection_budget
from ket.errors import KetError

if TYPE_CHECKING:
    from ket.runtime.supervisor import Service
    from ket.serve.app import Parts
    from ket.serve.server import HttpServer
    from ket.storage import BlobStore
    from ket.store.roster import SeenWorker

log = logging.getLogger("ket.serve")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
# the server's packages: import name -> distribution (Jinja for the dashboard's pages)
PACKAGES = {"starlette": "starlette", "uvicorn": "uvicorn", "jinja2": "jinja2"}


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    parser = commands.add_parser(
        "serve",
        parents=parents,
        help="serve the functions over HTTP",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_http_options(parser)
    add_budget_option(parser)
    add_log_options(parser)
    metrics.add_options(parser)
    parser.set_defaults(run=run)


def add_http_options(parser: argparse.ArgumentParser) -> None:
    """--host, --port and --access-log (also for `ket dev --all`)."""
    group = parser.add_argument_group("http")
    group.add_argument("--host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    group.add_argument(
        "--port",
        type=port_number,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0 takes a free one)",
    )
    group.add_argument(
        "--access-log", action="store_true", help="log every request (off: one line each costs)"
    )
    group.add_argument(
        "--header-timeout",
        type=seconds_above_zero,
        default=10.0,
        metavar="SECONDS",
        help="close a connection whose request line and headers are not in within this (10)",
    )
    group.add_argument(
        "--body-timeout",
        type=seconds_above_zero,
        default=30.0,
        metavar="SECONDS",
        help="close a connection whose request body is not in within this of its headers (30)",
    )
    group.add_argument(
        "--max-clients",
        type=clients_number,
        default=None,
        metavar="N",
        help="connections open at once; when full, the one that waited longest for its request "
        "is closed (1000, or what the open-file limit leaves)",
    )


def seconds_above_zero(text: str) -> float:
    """An argparse type: a number of seconds above 0 (and below a day)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, got {text!r}")
    return value


def clients_number(text: str) -> int:
    """An argparse type: a number of connections, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535."""
    if not text.isdigit() or int(text) > 65_535:
        raise argparse.ArgumentTypeError(f"port must be a number from 0 to 65535, got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    configure_logging(
        args.log_level,
        "%(asctime)s %(levelname)s %(name)s: %(message)s",
        log_format=log_format(args, os.environ),
        third_party=log_third_party(os.environ),
    )
    catalog = Catalog.build(deployment_of(args))
    check_servable(catalog, "ket serve")
    chosen = metrics.settings(args, os.environ)
    if chosen is not None:
        metrics.require()  # say what to install before anything starts
    tenant_urls(args)  # an unknown --tenant or an unreadable registry stops the start here
    args.max_connections = connection_budget(args.max_connections, os.environ)
    from ket.runtime.contexts import default_blobs

    blobs = default_blobs()  # a bad KET_STORAGE_URL stops the start, naming it
    sock = listen_for(args)
    return run_service(serve_http(catalog, args, sock, blobs, chosen))


def announce_dashboard(catalog: Catalog, url: str) -> None:
    """Log where the dashboard is and who signs in to it: the first thing a user looks for."""
    path, authenticate = catalog.serve.dashboard, catalog.serve.authenticate
    if path is None or authenticate is None:
        return
    name = f"{authenticate.__module__}.{getattr(authenticate, '__qualname__', authenticate)}"
    log.info("dashboard at %s%s/: sign in with a token that %s accepts", url, path, name)


def check_servable(catalog: Catalog, command: str) -> None:
    """KetError unless the server's packages are installed and the deployment declares an
    authenticator: the server never serves anonymously."""
    needed = [n for n in PACKAGES if n != "jinja2" or catalog.serve.dashboard is not None]
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        verb, them = ("is", "it") if len(missing) == 1 else ("are", "them")
        raise KetError(
            f"{command} needs {' and '.join(PACKAGES[m] for m in missing)}, which {verb} not "
            f"installed (ket-jobs depends on {them}: the install is incomplete): "
            f"pip install {' '.join(PACKAGES[m] for m in missing)}"
        )
    if catalog.serve.authenticate is None:
        raise KetError(
            f"{command} refuses to start: deployment {catalog.deployment!r} declares no "
            "authenticator, and the server never serves anonymously; declare "
            'define_deployment(..., serve={"authenticate": fn}) (see docs/serve.md)'
        )


def listen_for(args: argparse.Namespace) -> socket.socket:
    from ket.serve.server import listen

    return listen(args.host, args.port)


def http_server(
    catalog: Catalog,
    args: argparse.Namespace,
    sock: socket.socket,
    blobs: BlobStore | None = None,
    chosen: metrics.MetricsSettings | None = None,
) -> HttpServer:
    """The server of `catalog`'s functions on `sock`, for the command line's tenants; `blobs`
    is where ctx.storage keeps blobs (None: what KET_STORAGE_URL names); with `chosen`, its
    metrics are served too."""
    from ket.cli.workers import read_workers
    from ket.runtime.tenancy import database_template
    from ket.serve.app import create_app
    from ket.serve.server import HttpServer, client_limits

    registry = registry_reader(args.database_url)

    async def list_tenants() -> dict[str, str | None]:
        return await asyncio.to_thread(registry.databases)

    async def list_workers() -> list[SeenWorker]:
        return await asyncio.to_thread(lambda: read_workers(args.database_url)[1])

    served: list[metrics.ServeMetrics] = []

    def services(parts: Parts) -> list[Service]:
        return [served[0].service(parts.stores.open_stores)] if served else []

    app = create_app(
        catalog,
        list_tenants=list_tenants,
        template=database_template(args.database_url),
        open_store=creating_store,
        only=args.tenant,
        list_workers=list_workers,
        blobs=blobs,
        services=services,
        # what a function enqueues and what the dashboard retries wakes the workers, which
        # listen on the control database once the registry lists tenants on PostgreSQL
        channels=control_channels(registry.url),
    )
    if chosen is not None:
        manifest = metrics.manifest_label(deployment_of(args))
        served.append(metrics.start_serve(chosen, catalog, app, manifest=manifest))
    limits = client_limits(
        args.header_timeout, args.body_timeout, args.max_clients, args.max_connections
    )
    return HttpServer(
        app,
        sock,
        grace_seconds=catalog.serve.shutdown_grace_ms / 1000,
        access_log=args.access_log,
        limits=limits,
        on_close=[s.close for s in served],
    )


async def serve_http(
    catalog: Catalog,
    args: argparse.Namespace,
    sock: socket.socket,
    blobs: BlobStore | None = None,
    chosen: metrics.MetricsSettings | None = None,
) -> int:
    """Serve until a signal; the exit code. The process holds at most `args.max_connections`
    to each PostgreSQL server, over every tenant's store it opens (ket.connection.budget), as a
    worker does: a server with many tenants no longer takes a pool of each."""
    from ket.connection import budget
    from ket.serve.server import address

    # fair between tenants: one called without pause does not keep another's calls waiting
    budget.install_per_server(args.max_connections, fair=True)
    server = http_server(catalog, args, sock, blobs, chosen)
    signals = 0

    def on_signal(number: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info(
                "received %s: finishing requests in flight, then stopping",
                signal.Signals(number).name,
            )
            server.stop()
        else:
            log.warning("second signal: stopping now")
            server.force()

    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, on_signal, number)
    log.info(
        "serving the functions of deployment %s on %s (pid %d)",
        catalog.deployment,
        address(sock),
        os.getpid(),
    )
    announce_dashboard(catalog, address(sock))
    code = await server.run()
    log.info("server stopped")
    return code
