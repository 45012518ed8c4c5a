"""The metrics of a ket process, for Prometheus: lifecycle events as counters and histograms,
the tenants' job stats as gauges, the worker's slots, and `ket_info`, in a registry of their own.

    metrics = Metrics(catalog, manifest=digest) # tenant_labels=True to label by tenant
    metrics.watch_slots(fleet.slots)            # a worker: its busy and total slots
    unsubscribe = metrics.subscribe(hooks)      # count the events the worker emits
    StatsService(fleet.stores, metrics.publish, interval=15.0)   # feed the gauges
    body, content_type = metrics.exposition(accept_header)       # what GET /metrics answers

Per job the hook costs a dictionary look-up and a few list updates (observe/tally.py): an
event's label values are worked out once per (kind, tenant, queue, job) and its series kept. The
hook takes only the kinds of event it counts. Events must arrive on one thread (a worker's event
loop), as the tallies take no lock.

Every series of a declared job and queue exists from the start, at zero (without tenant labels:
tenants come and go), so a rate over a worker that has run nothing yet is 0, not absent. A
process that runs no job (`ket serve`: `worker=False`) registers none of the worker's metrics.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ket.catalog import Catalog
from ket.distribution import version
from ket.observe.gauges import JobGauges
from ket.observe.labels import Labels
from ket.observe.tally import Cell, CounterTally, HistogramTally
from ket.runtime.events import Event, Hooks, Kind
from ket.runtime.stats import Snapshot
from ket.store.roster import SeenWorker, WorkerInfo, manifest_counts

# How an attempt ended: the `outcome` label of ket_job_attempts_total.
OUTCOMES: tuple[Kind, ...] = (
    "completed",
    "failed",
    "discarded",
    "cancelled",
    "snoozed",
    "handed_back",
    "lease_lost",
)
# Not `started`: an outcome's event carries the attempt's wait too, so one event per attempt
# does (the hook is most of what metrics cost a worker, and an event is most of the hook).
KINDS: tuple[Kind, ...] = (*OUTCOMES, "rescued", "schedule_fired", "poll_failed", "enqueued")
# Handler run times, in seconds: from a millisecond to half an hour (a long timeout_ms).
DURATION_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    1800,
)
# Waits from due to start, in seconds: milliseconds when workers keep up, minutes when not.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
# Raw (kind, tenant, queue, job) keys remembered; only rows of undeclared jobs, each counted as
# `other`, or tenants beyond this many could go past it.
KEYS_MAX = 10_000


class Metrics:
    """One process's metrics: its registry, the event hook, and the job-stats gauges."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        tenant_labels: bool = False,
        process: bool = True,
        worker: bool = True,
        manifest: str = "",
    ):
        self.labels = labels = Labels(catalog, tenants=tenant_labels)
        self.registry = CollectorRegistry(auto_describe=True)
        if process:  # process_cpu_seconds_total, process_resident_memory_bytes, python_gc_*
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        self.registry.register(_Info(version(), manifest))
        self._attempts = CounterTally(
            "ket_job_attempts",
            "Attempts that ended in this process, by outcome (completed, failed: to be retried, "
            "discarded, cancelled, snoozed, handed_back, lease_lost).",
            labels.names("queue", "job", "outcome"),
        )
        self._duration = HistogramTally(
            "ket_job_duration_seconds",
            "How long attempts ran in this process, from handler start to its outcome.",
            labels.names("queue", "job"),
            DURATION_BUCKETS,
            per_second=1000,  # observed in milliseconds, as events carry it
        )
        self._wait = HistogramTally(
            "ket_job_wait_seconds",
            "From when a job was due (its enqueue, for a job enqueued to run now) to the start "
            "of its attempt in this process, observed when the attempt ends.",
            labels.names("queue", "job"),
            WAIT_BUCKETS,
            per_second=1000,
        )
        self._rescued = CounterTally(
            "ket_jobs_rescued",
            "Executing jobs whose lease expired, moved back to work (or discarded) by this "
            "process's rescuer.",
            labels.names("queue", "job"),
        )
        self._fires = CounterTally(
            "ket_schedule_fires",
            "Schedule ticks fired by this process (each tick fires once across replicas).",
            labels.names("job"),
        )
        self._skips = CounterTally(
            "ket_schedule_ticks_skipped",
            "Schedule ticks passed over (downtime, a pause) before the ticks this process fired.",
            labels.names("job"),
        )
        self._poll_failures = CounterTally(
            "ket_poll_failures",
            "Claims of a queue that failed (the database away, a missing table).",
            labels.names("queue"),
        )
        self._enqueued = CounterTally(
            "ket_jobs_enqueued",
            "Jobs this process enqueued (its handlers' ctx.jobs, its schedule fires), by queue "
            "and job; a coalesced enqueue (an active unique key) included.",
            labels.names("queue", "job"),
        )
        if worker:
            self.registry.register(_Events(self))
        self.gauges = JobGauges(labels)
        self.registry.register(self.gauges)
        self._by_tenant = tenant_labels
        self._duration_bounds = self._duration.bounds  # read per job: one look-up, not two
        self._wait_bounds = self._wait.bounds
        # the series of an event's raw (kind, tenant, queue, job): the cells it updates
        self._keys: dict[tuple[Any, ...], tuple[Cell, Cell, Cell | None]] = {}
        self._on: dict[str, Callable[[Event], None]] = {
            "rescued": self._rescue,
            "schedule_fired": self._fired,
            "poll_failed": self._poll_failed,
            "enqueued": self._enqueue,
        }
        for kind in OUTCOMES:
            self._on[kind] = self._ended
        if worker and not tenant_labels:
            self._zero(catalog)

    def _zero(self, catalog: Catalog) -> None:
        """A series at zero for every declared job and queue (a rate reads 0, not nothing)."""
        labels = self.labels
        for name, spec in sorted(catalog.jobs.items()):
            values = (labels.queue(spec.queue), labels.job(name))
            for outcome in OUTCOMES:
                self._attempts.cell((*values, outcome))
            self._duration.cell(values)
            self._wait.cell(values)
            self._rescued.cell(values)
            self._enqueued.cell(values)
            if spec.schedule is not None:
                self._fires.cell((labels.job(name),))
                self._skips.cell((labels.job(name),))
        for queue in sorted(catalog.worker.queues):
            self._poll_failures.cell((labels.queue(queue),))

    def watch_slots(self, slots: Callable[[], Mapping[tuple[str, str], tuple[int, int]]]) -> None:
        """Report a worker's slots: `slots()` gives, by (tenant, queue), the attempts running
        and the slots there are (read at each scrape, from memory)."""
        self.registry.register(_Slots(self.labels, slots))

    def watch_manifests(self) -> Callable[[WorkerInfo, list[SeenWorker]], None]:
        """Report `ket_worker_manifests`: the watcher to give the worker's presence service,
        which calls it with the roster at each report."""
        manifests = _Manifests()
        self.registry.register(manifests)
        return manifests.see

    def subscribe(self, hooks: Hooks) -> Callable[[], None]:
        """Count the events of `hooks` from now on; returns a function that stops it."""
        # the outcomes straight to their handler: one call less per job than through observe
        stops = [hooks.subscribe(self._ended, OUTCOMES)]
        stops += [hooks.subscribe(self._on[kind], [kind]) for kind in KINDS if kind not in OUTCOMES]

        def unsubscribe() -> None:
            for stop in stops:
                stop()

        return unsubscribe

    def observe(self, event: Event) -> None:
        """Count one lifecycle event (the hook)."""
        on = self._on.get(event.kind)
        if on is not None:
            on(event)

    def publish(self, snapshot: Snapshot) -> None:
        """The tenants' latest job stats, for the gauges (runtime/stats.py calls this)."""
        self.gauges.publish(snapshot)

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """The body and content type of a scrape: the Prometheus text format, or OpenMetrics
        when the `Accept` header asks for it."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type

    def families(self) -> Iterator[Metric]:
        """The counters and histograms as they are now."""
        for tally in (self._attempts, self._rescued, self._fires, self._skips, self._enqueued):
            yield tally.family()
        yield self._poll_failures.family()
        yield self._duration.family()
        yield self._wait.family()

    # -- the events (per job: keep these short) ---------------------------------------------

    def _ended(self, event: Event) -> None:
        kind = event.kind
        key = (kind, event.tenant if self._by_tenant else "", event.queue, event.name)
        cells = self._keys.get(key)
        waited = event.waited_ms
        if cells is None or (waited is not None and cells[2] is None):
            cells = self._remember(key, event)
        attempts, duration, wait = cells
        attempts[0] += 1
        took = event.duration_ms
        if took is not None:
            duration[bisect_left(self._duration_bounds, took)] += 1
            duration[-1] += took
        if wait is not None and waited is not None:  # an attempt that reached its handler
            wait[bisect_left(self._wait_bounds, waited)] += 1
            wait[-1] += waited

    def _remember(self, key: tuple[Any, ...], event: Event) -> tuple[Cell, Cell, Cell | None]:
        """The cells an outcome of `key` updates: its attempts counter, its duration histogram
        and, once an attempt of it has waited, its wait histogram (an attempt that never
        started, of a job the deployment dropped, makes no empty wait series)."""
        if len(self._keys) >= KEYS_MAX:
            self._keys.clear()
        values = self._values(event)
        cells = (
            self._attempts.cell((*values, event.kind)),
            self._duration.cell(values),
            None if event.waited_ms is None else self._wait.cell(values),
        )
        self._keys[key] = cells
        return cells

    def _rescue(self, event: Event) -> None:
        self._rescued.cell(self._values(event))[0] += 1

    def _fired(self, event: Event) -> None:
        job = (*self.labels.tenant(event.tenant), self.labels.job(event.name))
        self._fires.cell(job)[0] += 1
        if event.skipped:
            self._skips.cell(job)[0] += event.skipped

    def _enqueue(self, event: Event) -> None:
        self._enqueued.cell(self._values(event))[0] += 1

    def _poll_failed(self, event: Event) -> None:
        queue = (*self.labels.tenant(event.tenant), self.labels.queue(event.queue))
        self._poll_failures.cell(queue)[0] += 1

    def _values(self, event: Event) -> tuple[str, ...]:
        """The (tenant,) queue and job label values of an event, bounded."""
        labels = self.labels
        return (*labels.tenant(event.tenant), labels.queue(event.queue), labels.job(event.name))


class _Info:
    """`ket_info`: 1, labelled with ket's version and the deployment's manifest (the first
    characters of its digest, as `ket workers list` shows it): replicas whose `manifest`
    differ run different deployments."""

    def __init__(self, version: str, manifest: str) -> None:
        self._version = version
        self._manifest = manifest

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "ket_info",
            "This process: ket's version and the deployment's manifest (its digest's start).",
            labels=["version", "manifest"],
        )
        info.add_metric([self._version, self._manifest], 1)
        yield info


class _Manifests:
    """`ket_worker_manifests`: how many manifests the live workers in the control database run,
    as this worker's last report read the roster (1 when all run one deployment; no sample
    before the first report)."""

    def __init__(self) -> None:
        self._count: int | None = None

    def see(self, info: WorkerInfo, seen: list[SeenWorker]) -> None:
        self._count = len(manifest_counts(seen))

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "ket_worker_manifests",
            "Manifests the live workers of the control database run (more than 1: replicas run "
            "different deployments), as this worker last read the roster.",
        )
        if self._count is not None:
            family.add_metric([], self._count)
        yield family


class _Slots:
    """`ket_worker_slots` and `ket_worker_slots_busy`: a worker's slots by queue, and the
    attempts running in them, read from memory at each scrape."""

    def __init__(
        self, labels: Labels, slots: Callable[[], Mapping[tuple[str, str], tuple[int, int]]]
    ) -> None:
        self._labels = labels
        self._slots = slots

    def collect(self) -> Iterator[Metric]:
        labels = self._labels
        names = labels.names("queue")
        total = GaugeMetricFamily(
            "ket_worker_slots",
            "Slots of this worker by queue (its concurrency, for every tenant it serves).",
            labels=names,
        )
        busy = GaugeMetricFamily(
            "ket_worker_slots_busy",
            "Attempts running in this worker's slots by queue, when scraped.",
            labels=names,
        )
        summed: dict[tuple[str, ...], list[int]] = {}
        for (tenant, queue), (running, slots) in self._slots().items():
            key = (*labels.tenant(tenant), labels.queue(queue))
            cell = summed.setdefault(key, [0, 0])
            cell[0] += running
            cell[1] += slots
        for key, (running, slots) in sorted(summed.items()):
            busy.add_metric(list(key), running)
            total.add_metric(list(key), slots)
        yield total
        yield busy


class _Events:
    """The collector of the event tallies (a prometheus_client collector)."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self._metrics.families()
