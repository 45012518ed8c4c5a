"""`ket dev`: run the app locally on the embedded default, with nothing else installed.

Migrates the tenant databases (an embedded SQLite file under `.ket/` unless KET_DATABASE_URL says
otherwise), then runs the worker with readable logs until Ctrl-C. `--call NAME JSON` calls a
function once the worker is running, e.g. to place a first order and watch its jobs run.
--concurrency QUEUE=N (or KET_WORKER_CONCURRENCY) changes a queue's concurrency as for `ket worker`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from ket.catalog import Catalog
from ket.cli import concurrency
from ket.cli.call import call_on_tenant, parse_input, redactor
from ket.cli.concurrency import HostConcurrency
from ket.cli.migrate import migrate_all
from ket.cli.options import add_log_options, deployment_of, log_format, log_third_party
from ket.cli.output import clip, configure_logging, escape
from ket.cli.runtime import run_service, single_tenant, tenant_urls
from ket.cli.worker import serve
from ket.runtime.outcome import describe

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
        "--all", action="store_true", help="run every role this ket has (today: the worker)"
    )
    parser.add_argument(
        "--call",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "JSON"),
        help="call a function once the worker runs (repeatable)",
    )
    concurrency.add_option(parser)
    add_log_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    configure_logging(
        args.log_level,
        "%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        log_format=log_format(args, os.environ),
        third_party=log_third_party(os.environ),
    )
    logging.getLogger("ket.jobs").setLevel(min(logging.DEBUG, logging.getLevelName(args.log_level)))
    settings = concurrency.read(args.concurrency, os.environ)
    catalog = settings.apply(Catalog.build(deployment_of(args)))
    calls = [(name, parse_input(text)) for name, text in args.call]
    urls = tenant_urls(args)
    if calls:
        urls = dict([single_tenant(args)])  # --call needs one tenant
    asyncio.run(migrate_all(catalog, urls))
    return run_service(_dev(catalog, args, settings, urls, calls))


async def _dev(
    catalog: Catalog,
    args: argparse.Namespace,
    settings: HostConcurrency,
    urls: dict[str, str],
    calls: list[tuple[str, dict[str, object]]],
) -> int:
    serving = asyncio.ensure_future(serve(catalog, args.database_url, args.tenant, settings))
    if calls:
        await asyncio.sleep(0.5)
        [(name, url)] = urls.items()
        try:
            for (function, _), result in zip(
                calls, await call_on_tenant(catalog, name, url, calls), strict=True
            ):
                log.info("called %s: %s", function, result)
        except Exception as error:  # a failing demo call must not stop the worker
            failure = clip(describe(error, redactor(catalog, calls)))
            sys.stderr.write(f"ket dev: calling failed: {escape(failure)}\n")
    return await serving
