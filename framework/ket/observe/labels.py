"""Label values whose number is bounded by the deployment, never by the data.

A queue or job name on a metric comes from the manifest: a row naming a job or queue the
deployment does not declare (an old release's, a typo's) is counted under `other`, so no row can
add a series. Job ids never become labels; tenant names only when the operator opts in
(`--metrics-tenant-labels`), since a thousand tenants make a thousand times the series.
"""

from __future__ import annotations

from ket.catalog import Catalog

OTHER = "other"


class Labels:
    """Maps the names an event or a stats row carries to bounded label values."""

    def __init__(self, catalog: Catalog, *, tenants: bool = False) -> None:
        self.tenants = tenants
        self.queues: tuple[str, ...] = tuple(sorted(catalog.worker.queues))
        self._queues = frozenset(self.queues)
        self._jobs = frozenset(catalog.jobs)

    def names(self, *names: str) -> list[str]:
        """The label names of a metric: `tenant` first when tenants are labels."""
        return ["tenant", *names] if self.tenants else list(names)

    def tenant(self, name: str) -> tuple[str, ...]:
        """The tenant part of a label tuple: the tenant, or nothing."""
        return (name,) if self.tenants else ()

    def queue(self, name: str | None) -> str:
        """`name` if the deployment declares that queue, else `other`."""
        return name if name is not None and name in self._queues else OTHER

    def job(self, name: str | None) -> str:
        """`name` if the deployment declares that job, else `other`."""
        return name if name is not None and name in self._jobs else OTHER
