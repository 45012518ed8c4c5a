"""`ket worker`: run the deployment's jobs for every tenant (or one) until told to stop.

It serves every queue the deployment declares, or those --queues mail,default (or
KET_WORKER_QUEUES) names, leaving the others to other workers. Each queue runs up to its declared
concurrency of jobs at once per tenant, unless this host says otherwise with --concurrency
QUEUE=N or KET_WORKER_CONCURRENCY="QUEUE=N,..." (the flag wins); QUEUE=0 leaves QUEUE to
other workers, as --queues does.

SIGTERM or SIGINT stops claiming, lets running jobs finish within `shutdown_grace_ms`, aborts
the rest (reason `shutdown`) and hands them back, then exits 0. A second signal hands back what
it can within half a second and exits within a second, whatever handler threads are doing. A
worker still running STUCK_SECONDS after its grace and the abort grace writes every thread's
stack to stderr (headed "Timeout"), so that a shutdown that hangs says where.

--burst runs what is due now (and the jobs those enqueue that are due now), fires the schedules'
due ticks once, then stops as at a signal: exit 0, or 1 if it discarded a job it ran, or 2 if a
tenant's database could not be opened or failed at the start. Jobs due later are left for later.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from ket.catalog import Catalog
from ket.cli import concurrency, metrics
from ket.cli.concurrency import HostConcurrency
from ket.cli.options import add_log_options, deployment_of, log_format, log_third_party
from ket.cli.output import configure_logging
from ket.cli.presence import presence_service, report_interval, tenant_share
from ket.cli.runtime import (
    control_channels,
    control_url,
    open_store,
    registry_reader,
    run_service,
    tenant_urls,
    worker_id,
)
from ket.connection import budget
from ket.connection.address import name_connections
from ket.connection.budget import DEFAULT_LIMIT, MIN_LIMIT, RESERVED
from ket.connection.url import is_postgres
from ket.declare.deployment import DeploymentDecl
from ket.errors import KetError
from ket.runtime.contexts import default_blobs, default_sender
from ket.runtime.flag import Flag
from ket.runtime.fleet import Drained, Fleet
from ket.runtime.runner import ABORT_GRACE_SECONDS
from ket.runtime.supervisor import Supervisor
from ket.runtime.tenancy import database_template
from ket.runtime.threads import HandlerThreads, handler_threads
from ket.runtime.worker import SERVICE_CONNECTIONS, connections_needed, loop_connections
from ket.storage import BlobStore
from ket.store.contract import JobStore

log = logging.getLogger("ket.worker")
T = TypeVar("T")

# The second signal: how long handing back may take, and when the process is gone regardless.
HAND_BACK_SECONDS = 0.5
EXIT_SECONDS = 0.9
PRESENCE_TIMEOUT_SECONDS = 30.0
# After the first signal, past the grace and the abort grace: a worker not gone by then is stuck
STUCK_SECONDS = 10.0
# After the worker stopped: a process not gone by then waits for a thread that never ends
EXIT_WATCH_SECONDS = 10.0


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
    concurrency.add_options(parser)
    parser.add_argument(
        "--burst",
        action="store_true",
        help="run the jobs due now (and those they enqueue), fire due schedule ticks once, then "
        "exit: 0, or 1 if a job it ran was discarded, or 2 if a tenant's database failed",
    )
    add_budget_option(parser)
    add_log_options(parser)
    metrics.add_options(parser)
    parser.set_defaults(run=run)


def add_budget_option(parser: argparse.ArgumentParser) -> None:
    """--max-connections, for the commands that serve tenants (the worker, `ket serve`)."""
    parser.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="the most connections this process holds at once to each PostgreSQL server, over "
        f"every tenant on it (default: KET_MAX_CONNECTIONS, else {DEFAULT_LIMIT}); work waits "
        "for one, it never fails for want of one",
    )


def connection_budget(given: int | None, environ: Mapping[str, str]) -> int:
    """The process's connection budget: --max-connections, else KET_MAX_CONNECTIONS, else the
    default; KetError naming a value that is not a whole number of at least MIN_LIMIT."""
    if given is not None:
        limit: object = given
        where = "--max-connections"
    else:
        text = environ.get("KET_MAX_CONNECTIONS") or str(DEFAULT_LIMIT)
        where = "KET_MAX_CONNECTIONS"
        try:
            limit = int(text)
        except ValueError:
            raise KetError(f"{where} must be a whole number, got {text!r}") from None
    if not isinstance(limit, int) or limit < MIN_LIMIT:
        raise KetError(
            f"{where} must be at least {MIN_LIMIT} (the worker's own statements keep "
            f"{RESERVED} of it for themselves), got {limit!r}"
        )
    return limit


def run(args: argparse.Namespace) -> int:
    configure_logging(
        args.log_level,
        "%(asctime)s %(levelname)s %(name)s: %(message)s",
        log_format=log_format(args, os.environ),
        third_party=log_third_party(os.environ),
    )
    settings = concurrency.read(args.concurrency, os.environ, queues=args.queues)
    chosen = metrics.settings(args, os.environ)
    if chosen is not None:
        metrics.require()  # say what to install before anything starts
    deployment = deployment_of(args)
    catalog = Catalog.build(deployment)
    served = settings.apply(catalog)  # an unknown queue, or none left, is refused now
    pool_settings(served, os.environ)  # and a pool too small, before serving anything
    handler_threads_setting(served, os.environ)  # and too few handler threads
    limit = connection_budget(args.max_connections, os.environ)
    report_interval(catalog, os.environ)  # and a bad KET_PRESENCE_INTERVAL_S
    urls = tenant_urls(args)  # an unknown --tenant is an error now, not a silent idle worker
    check_pooler(urls[min(urls)], control_url(args.database_url), os.environ)
    blobs = default_blobs()  # a bad KET_STORAGE_URL stops the start, naming it
    return run_service(
        serve(
            catalog,
            args.database_url,
            args.tenant,
            settings,
            deployment=deployment,
            blobs=blobs,
            metrics_settings=chosen,
            max_connections=limit,
            burst=args.burst,
        )
    )


def pool_settings(catalog: Catalog, environ: Mapping[str, str]) -> tuple[int, float]:
    """Each tenant's connection pool: its size (KET_POOL_SIZE, at least what the queues'
    concurrency needs, which is the default) and how long work waits for a connection
    (KET_POOL_TIMEOUT_S, default 30 s). `catalog` carries the concurrency this host runs."""
    needed = connections_needed(catalog.worker)
    size = _number(environ, "KET_POOL_SIZE", needed, int)
    if size < needed:
        slots = sum(catalog.worker.queues.values())
        raise KetError(
            f"KET_POOL_SIZE={size} is too small for this deployment: it needs {needed} "
            f"connections per tenant ({slots} job slots + {len(catalog.worker.queues)} queue "
            f"claim loops + {SERVICE_CONNECTIONS} services); raise it or unset it"
        )
    wait = _number(environ, "KET_POOL_TIMEOUT_S", 30.0, float)
    if not 0 < wait < 86_400:
        raise KetError(f"KET_POOL_TIMEOUT_S must be a number of seconds above 0, got {wait!r}")
    return size, wait


def handler_threads_setting(catalog: Catalog, environ: Mapping[str, str]) -> int:
    """The threads the plain handlers of every tenant share (KET_HANDLER_THREADS; by default
    DEFAULT_HANDLER_THREADS, or one tenant's job slots if those are more); fewer than one
    tenant's job slots is refused."""
    slots = sum(catalog.worker.queues.values())
    given = _number(environ, "KET_HANDLER_THREADS", 0, int)
    if environ.get("KET_HANDLER_THREADS") and given < max(slots, 1):
        raise KetError(
            f"KET_HANDLER_THREADS={given} is too few for this deployment: one tenant has "
            f"{slots} job slots, and each must find a thread; raise it or unset it"
        )
    return handler_threads(catalog, given or None)


def _number(environ: Mapping[str, str], name: str, default: T, kind: Callable[[str], T]) -> T:
    text = environ.get(name)
    if not text:
        return default
    try:
        return kind(text)
    except ValueError:
        raise KetError(f"{name} must be a number, got {text!r}") from None


class Stopping:
    """SIGTERM and SIGINT for a command that runs the worker: the first sets `event` and calls
    every callback given to `also` (the HTTP server of `ket dev --all` stops with the worker);
    the second hands running jobs back within half a second and exits within a second,
    whatever handler threads are doing."""

    def __init__(self, command: str = "ket worker") -> None:
        self.event = asyncio.Event()
        self.fleet: Fleet | None = None
        # seconds after the first signal when every thread's stack goes to stderr (the grace and
        # the abort grace and STUCK_SECONDS, once the command knows its grace)
        self.stuck_after: float | None = None
        self._command = command
        self._also: list[Callable[[], None]] = []

    def install(self) -> None:
        """Handle SIGTERM and SIGINT on the running loop."""
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(number, self._on_signal, number)

    def also(self, stop: Callable[[], None]) -> None:
        """Call `stop` too at the first signal."""
        self._also.append(stop)

    def _on_signal(self, number: int) -> None:
        if self.event.is_set():
            sys.stderr.write(
                f"{self._command}: second signal: handing back running jobs and exiting\n"
            )
            # a stuck handler thread or a hung database call must not keep the process alive
            threading.Timer(EXIT_SECONDS, os._exit, (1,)).start()
            if self.fleet is not None:
                task = asyncio.get_running_loop().create_task(
                    self.fleet.hand_back_now(HAND_BACK_SECONDS)
                )
                task.add_done_callback(lambda _: os._exit(1))
            return
        log.info("received %s: finishing running jobs, then stopping", signal.Signals(number).name)
        if self.stuck_after is not None:
            # a C thread that writes even when the interpreter hangs at exit joining a thread
            faulthandler.dump_traceback_later(self.stuck_after, exit=False)
        self.event.set()
        for stop in self._also:
            stop()


class Registry(Protocol):
    url: str  # the registry database's

    def databases(self) -> dict[str, str | None]:
        """Every registered tenant, with its own database URL if it has one."""
        ...


async def read_tenants(registry: Registry) -> dict[str, str | None]:
    """The registered tenants, read in a thread within the process's budget (the reader opens
    a connection for the read and closes it). Urgent, as a worker's reports to the control
    database are: behind a herd of tenants starting, a refresh that waited its turn left the
    worker serving, for half a minute, tenants its peers had taken."""
    with budget.urgent():
        async with budget.held(registry.url):
            return await asyncio.to_thread(registry.databases)


def check_pooler(tenant: str, control: str, environ: Mapping[str, str]) -> None:
    """Refuse to start behind a pooler that cannot serve ket, or with a bad KET_LISTEN_URL,
    naming it; else send the LISTEN connections where KET_LISTEN_URL says (store/sql/pooler)."""
    listen = environ.get("KET_LISTEN_URL")
    if not (listen or is_postgres(tenant) or is_postgres(control)):
        return  # SQLite: no pooler, and psycopg is not loaded
    from ket.connection import pooler

    pooler.listen_through(listen)
    pooler.check_start(tenant, control)


async def serve(
    catalog: Catalog,
    database_url: str | None,
    tenant: str | None,
    settings: HostConcurrency | None = None,
    stopping: Stopping | None = None,
    deployment: DeploymentDecl | None = None,
    blobs: BlobStore | None = None,
    metrics_settings: metrics.MetricsSettings | None = None,
    max_connections: int | None = None,
    burst: bool = False,
) -> int:
    """Serve until a signal (or until `stopping.event` is set, when the caller handles the
    signals); returns the exit code. `catalog` is the deployment's, `settings` which of its
    queues this host serves and at what concurrency (None: every queue, at the declared
    concurrency); metrics are labelled by every declared queue. With the `deployment`, the worker
    records itself in the control database (`ket workers list`); `blobs` is where ctx.storage
    keeps blobs (None: what KET_STORAGE_URL names); with `metrics_settings`, metrics are
    served too. `burst`: until every tenant ran what is due (`--burst`)."""
    if stopping is None:
        stopping = Stopping()
        stopping.install()
    host = settings or HostConcurrency(settings={})
    declared, catalog = catalog, host.apply(catalog)
    registry = registry_reader(database_url)

    async def list_tenants() -> dict[str, str | None]:
        return await read_tenants(registry)

    pool, wait = pool_settings(catalog, os.environ)
    threads = handler_threads_setting(catalog, os.environ)
    loops = loop_connections(catalog.worker)
    if max_connections is None:
        max_connections = connection_budget(None, os.environ)
    # one budget on each PostgreSQL server over every connection this process opens to it
    # (ket.connection.budget): tenants on two servers get the budget on each
    budget.install_per_server(max_connections)

    async def open_tenant(url: str, **options: Any) -> JobStore:
        return await open_store(
            url,
            create=True,
            pool_size=pool,
            lane_size=loops,
            max_overflow=0,
            pool_timeout=wait,
            **options,
        )

    identity = worker_id()
    name_connections(f"ket worker {identity}")  # so pg_stat_activity shows whose they are
    blobs = blobs if blobs is not None else default_blobs()
    # its own supervisor, stopped after the tenants: the row stays while running jobs finish.
    # The first report comes within one interval, not at once: the worker takes its first jobs
    # before it loads the manifest room to hash the manifest (and, on SQLite, the roster's
    # engine); a first report that meets a busy database may take long, hence the timeout. With
    # several tenants to share, the first tenant refresh asks for that report at once instead.
    presence = Supervisor(tenant=None, stopping=Flag())
    service = share = None
    if deployment is not None:
        service = presence_service(
            deployment=deployment,
            catalog=catalog,
            worker_id=identity,
            tenant=tenant,
            database_url=database_url,
            environ=os.environ,
            # a burst lists what it serves: no worker that shares the tenants takes it for a peer
            serving=(lambda: tuple(sorted(fleet.workers))) if burst else None,
        )
        # failing reports are retried every interval, never backed off further: after an outage
        # of the control database the peers must hear from this worker within the time they
        # give it (ket.runtime.share), or they take it for dead
        presence.every(service, timeout=PRESENCE_TIMEOUT_SECONDS, patience=service.interval)
        if tenant is None and not burst:
            share = tenant_share(service, timeout=PRESENCE_TIMEOUT_SECONDS)
    stopping.stuck_after = (
        catalog.worker.shutdown_grace_ms / 1000 + ABORT_GRACE_SECONDS + STUCK_SECONDS
    )
    fleet = stopping.fleet = Fleet(
        catalog=catalog,
        template=database_template(database_url),
        list_tenants=list_tenants,
        open_store=open_tenant,
        worker_id=identity,
        sender=default_sender(),
        blobs=blobs,
        only=tenant,
        channels=control_channels(registry.url),
        share=share,
        burst=burst,
        threads=HandlerThreads(threads),
    )
    log.info(
        "worker %s serving deployment %s with queues %s; %s",
        identity,
        catalog.deployment,
        host.describe(catalog.worker, declared.worker.queues),
        _connections(database_template(database_url), registry.url, max_connections, pool),
    )
    log.info("ctx.storage keeps blobs in %r", blobs)
    departing: list[asyncio.Task[None]] = []
    if share is not None and service is not None:
        # at the first signal the peers hear at once that this worker gives its tenants up, so
        # they take them over while its running jobs finish, not only once its row goes (with
        # one tenant, which every worker serves, nobody waits for it: the row stays as it was)
        shared, departure = share, service.depart

        def depart() -> None:
            if shared.peers is not None:
                departing.append(asyncio.ensure_future(departure()))

        stopping.also(depart)
    served = None
    code = 0
    try:
        if metrics_settings is not None:
            manifest = "" if deployment is None else metrics.manifest_label(deployment)
            served = metrics.start(
                metrics_settings,
                declared,
                fleet.hooks,
                fleet.stores,
                slots=fleet.slots,
                manifest=manifest,
            )
            if service is not None:
                service.watch(served.see_workers)
        services = [served.service] if served is not None else []
        if burst:
            code = burst_code(await fleet.drain(stopping.event, services))
        else:
            await fleet.run(stopping.event, services)
    finally:
        registry.close()
        await presence.stop()
        for task in departing:
            await task  # it logs its own failure
        budget.install(None)
        name_connections(None)
        if service is not None:
            await service.leave()
        if served is not None:
            served.close()
    stuck = _handler_threads_running()
    if stuck:
        # handler threads that ignored their abort: their jobs were handed back and their
        # effects are refused, and the interpreter would wait for them forever at exit
        log.warning("exiting with %d handler threads still running: %s", len(stuck), stuck)
        logging.shutdown()
        os._exit(code)
    log.info("worker stopped")
    # what is left is the interpreter's exit; a thread that never ends would hold it forever
    exiting = threading.Timer(EXIT_WATCH_SECONDS, _exit_stuck, (code,))
    exiting.daemon = True
    exiting.start()
    return code


def _handler_threads_running(wait: float = 1.0) -> list[str]:
    """The handler threads still running a handler after `wait` seconds: idle ones end at once,
    the fleet having shut their pool down."""
    deadline = time.monotonic() + wait
    running = []
    for thread in threading.enumerate():
        if thread.name.startswith("ket-handler"):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                running.append(thread.name)
    return running


def _exit_stuck(code: int) -> None:
    """The process has not exited EXIT_WATCH_SECONDS after the worker stopped: name the threads
    it waits for, then exit without them."""
    main = threading.main_thread()
    waited = [t.name for t in threading.enumerate() if t is not main and not t.daemon]
    log.warning(
        "still not exited %g s after the worker stopped, waiting for threads %s; exiting anyway",
        EXIT_WATCH_SECONDS,
        waited,
    )
    faulthandler.dump_traceback(all_threads=True)
    logging.shutdown()
    os._exit(code)


def burst_code(drained: Drained) -> int:
    """A burst's exit code, after logging what it did: 2 when a tenant could not be drained (its
    database could not be opened, or failed the start: its jobs did not run), else 1 when it
    discarded a job it ran, else 0."""
    ran = ", ".join(f"{count} {kind}" for kind, count in sorted(drained.outcomes.items()))
    log.info(
        "burst over: %s run in %s%s",
        _counted(sum(drained.outcomes.values()), "job"),
        _counted(len(drained.tenants), "tenant"),
        f" ({ran})" if ran else "",
    )
    if drained.failed:
        log.error(
            "burst: tenants not drained (their database failed, as logged above): %s",
            ", ".join(drained.failed),
        )
        return 2
    return 1 if drained.discarded else 0


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _connections(template: str, registry: str, budget: int, pool: int) -> str:
    """What the start-up line says of connections: the budget counts PostgreSQL's alone, so on
    SQLite (the embedded default) it is not named."""
    if is_postgres(template) or is_postgres(registry):
        return f"up to {budget} connections on each PostgreSQL server, {pool} per tenant"
    return "tenant databases on SQLite"
