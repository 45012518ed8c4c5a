"""`ket worker --metrics-port N`: Prometheus metrics of the worker at http://HOST:N/metrics.

Off unless asked, and then loaded: without a port, the worker imports no prometheus_client and
subscribes no hook, so metrics cost nothing. With one, the worker counts its lifecycle events
and reads every tenant's job stats every KET_METRICS_REFRESH_S seconds (default 15) for the
gauges. Series are labelled by queue, job and outcome only; `--metrics-tenant-labels` (or
KET_METRICS_TENANT_LABELS=1) adds the tenant.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ket.catalog import Catalog
from ket.cli.options import environ_flag
from ket.declare.deployment import DeploymentDecl
from ket.errors import KetError
from ket.runtime.events import Hooks
from ket.runtime.stats import StatsService
from ket.store.contract import JobStore
from ket.store.roster import SeenWorker, WorkerInfo
from ket.store.types import ClaimLimits

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from ket.observe.exporter import Exporter
    from ket.observe.metrics import Metrics

log = logging.getLogger("ket.worker")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_REFRESH_SECONDS = 15.0
INSTALL = "pip install 'ket-jobs[metrics]' (or pip install prometheus_client)"


@dataclass(frozen=True, kw_only=True, slots=True)
class MetricsSettings:
    """Where to serve metrics, how often the gauges are read, whether tenants are labels."""

    host: str
    port: int
    tenant_labels: bool
    refresh_seconds: float


def add_options(parser: argparse.ArgumentParser) -> None:
    """--metrics-port, --metrics-host and --metrics-tenant-labels."""
    group = parser.add_argument_group("metrics")
    group.add_argument(
        "--metrics-port",
        type=_port,
        metavar="N",
        help="serve Prometheus metrics at http://HOST:N/metrics (also KET_METRICS_PORT; "
        "0: a free port, logged)",
    )
    group.add_argument(
        "--metrics-host",
        metavar="HOST",
        help=f"the address to serve metrics on (default KET_METRICS_HOST, else {DEFAULT_HOST})",
    )
    group.add_argument(
        "--metrics-tenant-labels",
        action="store_true",
        default=None,
        help="label metrics by tenant too (also KET_METRICS_TENANT_LABELS=1)",
    )


def settings(args: argparse.Namespace, environ: Mapping[str, str]) -> MetricsSettings | None:
    """The metrics the command line and the environment ask for; None: no metrics."""
    port = args.metrics_port
    if port is None:
        text = environ.get("KET_METRICS_PORT")
        if not text:
            return None
        port = _environ_port(text)
    labels = args.metrics_tenant_labels
    if labels is None:
        labels = environ_flag(environ, "KET_METRICS_TENANT_LABELS")
    return MetricsSettings(
        host=args.metrics_host or environ.get("KET_METRICS_HOST") or DEFAULT_HOST,
        port=port,
        tenant_labels=labels,
        refresh_seconds=_refresh(environ.get("KET_METRICS_REFRESH_S")),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Running:
    """Metrics being served: the job stats service to run, the watcher of the workers' roster
    (`ket_worker_manifests`), and how to stop."""

    service: StatsService
    exporter: Exporter
    unsubscribe: Callable[[], None]
    see_workers: Callable[[WorkerInfo, list[SeenWorker]], None]

    def close(self) -> None:
        self.unsubscribe()
        self.exporter.close()


def start(
    chosen: MetricsSettings,
    catalog: Catalog,
    hooks: Hooks,
    stores: Callable[[], Mapping[str, JobStore]],
    *,
    slots: Callable[[], Mapping[tuple[str, str], tuple[int, int]]] | None = None,
    manifest: str = "",
) -> Running:
    """Count `hooks`' events, serve the metrics, and make the service that feeds the gauges
    from `stores()` (the caller runs it under its supervisor); `slots()` the worker's slots by
    (tenant, queue), running and all; `manifest` the deployment's digest, for `ket_info`."""
    require()
    from ket.observe.exporter import export
    from ket.observe.metrics import Metrics

    metrics = Metrics(catalog, tenant_labels=chosen.tenant_labels, manifest=manifest)
    if slots is not None:
        metrics.watch_slots(slots)
    exporter = export(metrics.registry, host=chosen.host, port=chosen.port)
    unsubscribe = metrics.subscribe(hooks)
    service = StatsService(
        stores, metrics.publish, interval=chosen.refresh_seconds, limits=catalog.claim_limits
    )
    log.info("serving metrics at %s", exporter.url)
    return Running(
        service=service,
        exporter=exporter,
        unsubscribe=unsubscribe,
        see_workers=metrics.watch_manifests(),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeMetrics:
    """Metrics of `ket serve` being served: its requests, and the job stats of its tenants."""

    metrics: Metrics
    refresh_seconds: float
    exporter: Exporter
    limits: Mapping[str, ClaimLimits]

    def service(self, stores: Callable[[], Mapping[str, JobStore]]) -> StatsService:
        """The service that feeds the gauges from `stores()` (the server runs it)."""
        return StatsService(
            stores, self.metrics.publish, interval=self.refresh_seconds, limits=self.limits
        )

    def close(self) -> None:
        self.exporter.close()


def start_serve(
    chosen: MetricsSettings, catalog: Catalog, app: Starlette, *, manifest: str = ""
) -> ServeMetrics:
    """Count `app`'s requests and serve the metrics on their own port (as the worker does:
    never on the functions' port, so scraping needs no principal and exposes nothing there).
    None of the worker's metrics: the server runs no job, and lists only what it fills."""
    require()
    from ket.observe.exporter import export
    from ket.observe.http import RequestCounts, RequestMetrics
    from ket.observe.metrics import Metrics

    metrics = Metrics(catalog, tenant_labels=chosen.tenant_labels, worker=False, manifest=manifest)
    app.add_middleware(RequestMetrics, counted=RequestCounts(metrics.registry, catalog))
    exporter = export(metrics.registry, host=chosen.host, port=chosen.port)
    log.info("serving metrics at %s", exporter.url)
    return ServeMetrics(
        metrics=metrics,
        refresh_seconds=chosen.refresh_seconds,
        exporter=exporter,
        limits=catalog.claim_limits,
    )


def manifest_label(deployment: DeploymentDecl) -> str:
    """The deployment's manifest digest as `ket_info` labels it: its first characters, as
    `ket workers list` prints it."""
    from ket.cli.presence import manifest_hash
    from ket.store.roster import SHORT_HASH

    return manifest_hash(deployment)[:SHORT_HASH]


def require() -> None:
    """Raise, saying what to install, when prometheus_client is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise KetError(f"metrics need the prometheus_client package: {INSTALL}") from None


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535."""
    try:
        return _checked_port(int(text), "--metrics-port")
    except (ValueError, KetError):
        raise argparse.ArgumentTypeError(
            f"a port is a number from 0 to 65535, got {text!r}"
        ) from None


def _environ_port(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        raise KetError(f"KET_METRICS_PORT must be a port number, got {text!r}") from None
    return _checked_port(number, "KET_METRICS_PORT")


def _checked_port(number: int, name: str) -> int:
    if not 0 <= number <= 65_535:
        raise KetError(f"{name} must be from 0 to 65535, got {number}")
    return number


def _refresh(text: str | None) -> float:
    if not text:
        return DEFAULT_REFRESH_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 3_600:
        raise KetError(
            f"KET_METRICS_REFRESH_S must be seconds above 0 and at most 3600, got {text!r}"
        )
    return seconds
