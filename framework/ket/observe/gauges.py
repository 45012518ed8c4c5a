"""The tenants' job stats as gauges: made at scrape time from the last snapshot that the job
stats service (runtime/stats.py) published, so a scrape costs no database round trip.

Across tenants, counts add up and ages take the oldest, unless tenants are labels. Every declared
queue has a series for every state and for each age (0 when it has no such job), so a drained
queue reads 0 rather than vanishing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ket.observe.labels import Labels
from ket.runtime.stats import Snapshot
from ket.store.types import JOB_STATES, JobStats


class JobGauges(Collector):
    """A prometheus_client collector over the last published job stats."""

    def __init__(self, labels: Labels) -> None:
        self._labels = labels
        self._snapshot: Snapshot = {}

    def publish(self, snapshot: Snapshot) -> None:
        """Replace the stats the next scrape reads (one assignment: a scrape running in the
        exporter's thread sees the old snapshot or the new one, never half of each)."""
        self._snapshot = dict(snapshot)

    def describe(self) -> Iterator[Metric]:
        return self._families(include_samples=False)

    def collect(self) -> Iterator[Metric]:
        return self._families(include_samples=True)

    def _families(self, *, include_samples: bool) -> Iterator[Metric]:
        labels = self._labels
        jobs = GaugeMetricFamily(
            "ket_jobs",
            "Jobs in the tenant databases by queue and state, as the last job stats read.",
            labels=labels.names("queue", "state"),
        )
        available = GaugeMetricFamily(
            "ket_jobs_oldest_available_age_seconds",
            "How long the queue's oldest job that is due and not running has waited (0: none).",
            labels=labels.names("queue"),
        )
        lease = GaugeMetricFamily(
            "ket_jobs_oldest_lease_age_seconds",
            "Time since the queue's oldest running attempt started (0: none running).",
            labels=labels.names("queue"),
        )
        expired = GaugeMetricFamily(
            "ket_jobs_expired",
            "Discarded jobs still kept that expired unstarted (expires_in), by queue.",
            labels=labels.names("queue"),
        )
        limited = GaugeMetricFamily(
            "ket_jobs_limited",
            "Due jobs a fleet-wide limit holds back, by queue (counted in ket_jobs too).",
            labels=labels.names("queue"),
        )
        dead = GaugeMetricFamily(
            "ket_jobs_dead_rows",
            "Dead row versions in the jobs table, where the database counts them (PostgreSQL).",
            labels=labels.names(),
        )
        if include_samples:
            for tenant, group in self._groups().items():
                self._add(tenant, group, jobs, available, lease, dead)
                self._per_queue(tenant, [s.expired for s in group], expired)
                self._per_queue(tenant, [s.limited for s in group], limited)
        yield from (jobs, available, lease, expired, limited, dead)

    def _groups(self) -> dict[tuple[str, ...], list[JobStats]]:
        """The stats to report under each tenant label (one group of all, without labels)."""
        snapshot = self._snapshot
        if self._labels.tenants:
            return {(tenant,): [stats] for tenant, stats in sorted(snapshot.items())}
        return {(): list(snapshot.values())} if snapshot else {}

    def _per_queue(
        self, tenant: tuple[str, ...], counts: list[Mapping[str, int]], family: GaugeMetricFamily
    ) -> None:
        """A count per queue, added up over the group (0 for a declared queue without one)."""
        labels = self._labels
        total = dict.fromkeys(labels.queues, 0)
        for by_queue in counts:
            for queue, count in by_queue.items():
                bounded = labels.queue(queue)
                total[bounded] = total.get(bounded, 0) + count
        for queue, count in total.items():
            family.add_metric([*tenant, queue], count)

    def _add(
        self,
        tenant: tuple[str, ...],
        group: list[JobStats],
        jobs: GaugeMetricFamily,
        available: GaugeMetricFamily,
        lease: GaugeMetricFamily,
        dead: GaugeMetricFamily,
    ) -> None:
        labels = self._labels
        counts = {(queue, state): 0 for queue in labels.queues for state in JOB_STATES}
        for stats in group:
            for (state, queue), count in stats.counts.items():
                key = (labels.queue(queue), state)
                counts[key] = counts.get(key, 0) + count
        for (queue, state), count in counts.items():
            jobs.add_metric([*tenant, queue, state], count)
        waiting = dict.fromkeys(labels.queues, 0.0)
        held = dict.fromkeys(labels.queues, 0.0)
        for stats in group:
            for queue, ages in stats.queue_ages.items():
                bounded = labels.queue(queue)
                waiting[bounded] = max(waiting.get(bounded, 0.0), ages.oldest_available_age or 0.0)
                held[bounded] = max(held.get(bounded, 0.0), ages.oldest_lease_age or 0.0)
        for queue, age in waiting.items():
            available.add_metric([*tenant, queue], age)
        for queue, age in held.items():
            lease.add_metric([*tenant, queue], age)
        rows = [s.dead_rows for s in group if s.dead_rows is not None]
        if rows:
            dead.add_metric(list(tenant), sum(rows))
