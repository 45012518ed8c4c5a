"""What a `ket worker` process reports about itself to the control database, where that is, and
the share of the tenants that the reports decide.

The manifest hash is the sha256 of the canonical YAML that `ket manifest` prints for the same
declarations (so `ket manifest | sha256sum` gives it), computed once, in a thread, at the first
report: the manifest room (and YAML) is loaded then, off the event loop, rather than before the
worker takes its first job.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from ket import distribution
from ket.catalog import Catalog
from ket.declare.deployment import DeploymentDecl
from ket.errors import KetError
from ket.runtime.presence import MAX_INTERVAL_SECONDS, PresenceService, presence_interval
from ket.runtime.share import TenantShare
from ket.runtime.supervisor import bounded
from ket.store.roster import WorkerInfo, WorkerRoster


def manifest_hash(deployment: DeploymentDecl) -> str:
    """The sha256 (hex) of the deployment's canonical manifest YAML, as `ket manifest` prints
    it."""
    from ket.manifest import compile_manifest, dump_manifest

    text = dump_manifest(compile_manifest(deployment))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def report_interval(catalog: Catalog, environ: Mapping[str, str]) -> float:
    """How often this worker reports itself: KET_PRESENCE_INTERVAL_S when set (above 0, at most
    a minute), else a third of the lease within 1 s and 60 s. The tests of the roster set it
    small so that a killed worker turns stale in a second, not in three."""
    text = environ.get("KET_PRESENCE_INTERVAL_S")
    if not text:
        return presence_interval(catalog.worker.lease_ms)
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_INTERVAL_SECONDS:
        raise KetError(
            f"KET_PRESENCE_INTERVAL_S must be seconds above 0 and at most "
            f"{MAX_INTERVAL_SECONDS:g}, got {text!r}"
        )
    return seconds


def presence_service(
    *,
    deployment: DeploymentDecl,
    catalog: Catalog,
    worker_id: str,
    tenant: str | None,
    database_url: str | None,
    environ: Mapping[str, str],
    serving: Callable[[], tuple[str, ...]] | None = None,
) -> PresenceService:
    """The service that keeps this worker's row in the control database; `catalog` carries the
    concurrency this host runs, `tenant` the one tenant served (None: all), `database_url` the
    --database-url option; `environ` may set the interval (`report_interval`). `serving`: the
    tenants served now, reported by name instead (a burst: listed, it is no peer of the workers
    that share every tenant)."""
    started = datetime.now(UTC)
    interval = report_interval(catalog, environ)

    async def describe() -> WorkerInfo:
        digest, version = await asyncio.to_thread(
            lambda: (manifest_hash(deployment), distribution.version())
        )
        return WorkerInfo(
            id=worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            started_at=started,
            tenants=serving() if serving is not None else None if tenant is None else (tenant,),
            queues=dict(catalog.worker.queues),
            version=version,
            manifest_hash=digest,
            interval_seconds=interval,
        )

    async def locate() -> str:
        from ket.cli.runtime import control_url
        from ket.connection import budget
        from ket.runtime.tenancy import registry_url

        # control_url reads the registry on a connection of its own
        async with budget.held(registry_url(database_url)):
            return await asyncio.to_thread(control_url, database_url)

    return PresenceService(
        describe=describe, locate=locate, open_roster=open_roster, interval=interval
    )


def tenant_share(service: PresenceService, *, timeout: float) -> TenantShare:
    """The tenants shared with the other workers that `service`'s reports find; when the
    roster was never read, reading it is one report, abandoned after `timeout` seconds like the
    supervisor's."""

    async def report() -> None:
        await bounded(service.tick(), timeout, service.name)

    share = TenantShare(read=report)
    service.watch(share.see)
    return share


def open_roster(url: str) -> WorkerRoster:
    """The worker roster of the control database at `url` (connects on first use)."""
    from ket.control.roster import SqlRoster

    return SqlRoster(url)
