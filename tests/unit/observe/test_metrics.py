"""The metrics registry: lifecycle events counted by queue, job and outcome with bounded labels,
the job stats as gauges, and the exposition a scrape gets."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ket import define_deployment, define_job, define_module
from ket.catalog import Catalog
from ket.observe.http import RequestCounts
from ket.observe.metrics import Metrics
from ket.runtime.events import Event, Hooks
from ket.store.roster import SeenWorker, WorkerInfo
from ket.store.types import JobStats, QueueAges


def handler(ctx: Any, input: Any) -> None:
    """A handler."""


SHOP = define_module(
    name="shop",
    jobs={
        "ship": define_job(idempotent=True, handler=handler),
        "mail": define_job(idempotent=True, queue="mail", handler=handler),
        "tick": define_job(idempotent=True, schedule={"every": "1m"}, handler=handler),
    },
)
CATALOG = Catalog.build(
    define_deployment(name="shop", modules=[SHOP], worker={"queues": {"default": 2, "mail": 4}}),
    environ={},
)
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics, prefix: str = "ket_") -> Samples:
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if sample.name.startswith(prefix) and not sample.name.endswith("_created")
    }


def of(found: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: value for (metric, labels), value in found.items() if metric == name}


def counted(found: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The series of `name` that counted something (every declared job's start at zero: see
    test_every_declared_series_starts_at_zero)."""
    return {labels: value for labels, value in of(found, name).items() if value}


def labels(**values: str) -> frozenset[tuple[str, str]]:
    return frozenset(values.items())


@pytest.fixture(autouse=True)
def quiet_jobs_logger() -> Iterator[None]:
    """Events not logged: what a hook gets does not depend on the test's log level."""
    logger = logging.getLogger("ket.jobs")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    yield
    logger.setLevel(level)


def attempt(kind: str, name: str, queue: str, *, tenant: str = "acme", **more: Any) -> Event:
    return Event(kind=kind, tenant=tenant, job_id=42, name=name, queue=queue, **more)  # type: ignore[arg-type]


def test_attempts_are_counted_by_queue_job_and_outcome() -> None:
    hooks, metrics = Hooks(), Metrics(CATALOG, process=False)
    metrics.subscribe(hooks)
    for kind, name, queue in [
        ("completed", "shop.ship", "default"),
        ("completed", "shop.ship", "default"),
        ("failed", "shop.ship", "default"),
        ("discarded", "shop.mail", "mail"),
        ("lease_lost", "shop.mail", "mail"),
    ]:
        hooks.emit(attempt(kind, name, queue, duration_ms=20.0))
    assert counted(samples(metrics), "ket_job_attempts_total") == {
        labels(queue="default", job="shop.ship", outcome="completed"): 2,
        labels(queue="default", job="shop.ship", outcome="failed"): 1,
        labels(queue="mail", job="shop.mail", outcome="discarded"): 1,
        labels(queue="mail", job="shop.mail", outcome="lease_lost"): 1,
    }
    durations = counted(samples(metrics), "ket_job_duration_seconds_count")
    assert durations == {
        labels(queue="default", job="shop.ship"): 3,
        labels(queue="mail", job="shop.mail"): 2,
    }
    sums = of(samples(metrics), "ket_job_duration_seconds_sum")
    assert sums[labels(queue="default", job="shop.ship")] == pytest.approx(0.06)


def test_the_wait_histogram_takes_the_wait_each_outcome_carries() -> None:
    hooks, metrics = Hooks(), Metrics(CATALOG, process=False)
    metrics.subscribe(hooks)
    hooks.emit(attempt("started", "shop.ship", "default", waited_ms=3.0))  # not counted twice
    hooks.emit(attempt("completed", "shop.ship", "default", waited_ms=3.0, duration_ms=1.0))
    hooks.emit(attempt("failed", "shop.ship", "default", waited_ms=70_000.0, duration_ms=1.0))
    hooks.emit(attempt("discarded", "shop.ship", "default", duration_ms=0.0))  # never started
    found = samples(metrics)
    key = labels(queue="default", job="shop.ship")
    assert counted(found, "ket_job_wait_seconds_count") == {key: 2}
    assert counted(found, "ket_job_wait_seconds_sum") == {key: 70.003}
    buckets = of(found, "ket_job_wait_seconds_bucket")
    assert buckets[labels(queue="default", job="shop.ship", le="0.001")] == 0
    assert buckets[labels(queue="default", job="shop.ship", le="0.005")] == 1
    assert buckets[labels(queue="default", job="shop.ship", le="60.0")] == 1
    assert buckets[labels(queue="default", job="shop.ship", le="300.0")] == 2
    assert counted(found, "ket_job_duration_seconds_count") == {key: 3}


def test_undeclared_jobs_and_queues_count_as_other_and_no_id_or_tenant_is_a_label() -> None:
    hooks, metrics = Hooks(), Metrics(CATALOG, process=False)
    metrics.subscribe(hooks)
    for n in range(50):  # rows of jobs this deployment does not declare, each another name
        hooks.emit(attempt("discarded", f"old.job_{n}", f"gone_{n}", tenant=f"t{n}"))
    hooks.emit(attempt("rescued", "shop.ship", "nowhere"))
    found = samples(metrics)
    assert counted(found, "ket_job_attempts_total") == {
        labels(queue="other", job="other", outcome="discarded"): 50
    }
    assert counted(found, "ket_jobs_rescued_total") == {labels(queue="other", job="shop.ship"): 1}
    names = {name for key in found for name, _ in key[1] if key[0] != "ket_info"}
    assert names <= {"queue", "job", "outcome", "state", "le"}


def test_tenants_become_a_label_only_when_asked() -> None:
    hooks, metrics = Hooks(), Metrics(CATALOG, tenant_labels=True, process=False)
    metrics.subscribe(hooks)
    hooks.emit(attempt("completed", "shop.ship", "default", tenant="acme"))
    hooks.emit(attempt("completed", "shop.ship", "default", tenant="globex"))
    hooks.emit(attempt("completed", "shop.ship", "default", tenant="globex"))
    assert counted(samples(metrics), "ket_job_attempts_total") == {
        labels(tenant="acme", queue="default", job="shop.ship", outcome="completed"): 1,
        labels(tenant="globex", queue="default", job="shop.ship", outcome="completed"): 2,
    }


def test_schedule_fires_skips_and_poll_failures_are_counted() -> None:
    hooks, metrics = Hooks(), Metrics(CATALOG, process=False)
    metrics.subscribe(hooks)
    hooks.emit(attempt("schedule_fired", "shop.tick", "default", skipped=0))
    hooks.emit(attempt("schedule_fired", "shop.tick", "default", skipped=3))
    hooks.emit(Event(kind="poll_failed", tenant="acme", queue="mail", error="no such table"))
    found = samples(metrics)
    assert counted(found, "ket_schedule_fires_total") == {labels(job="shop.tick"): 2}
    assert counted(found, "ket_schedule_ticks_skipped_total") == {labels(job="shop.tick"): 3}
    assert counted(found, "ket_poll_failures_total") == {labels(queue="mail"): 1}


def test_the_hook_asks_for_one_event_per_attempt_and_per_enqueue_and_none_per_start() -> None:
    hooks = Hooks()
    Metrics(CATALOG, process=False).subscribe(hooks)
    assert not hooks.wanted("started")
    assert hooks.wanted("completed") and hooks.wanted("failed") and hooks.wanted("rescued")
    assert hooks.wanted("enqueued")


def stats(
    counts: dict[tuple[str, str], int],
    ages: dict[str, tuple[float | None, float | None]],
    *,
    dead: int | None = None,
    expired: dict[str, int] | None = None,
    limited: dict[str, int] | None = None,
) -> JobStats:
    """Stats with `ages`: queue -> (oldest available age, oldest lease age)."""
    return JobStats(
        counts=counts,  # type: ignore[arg-type]
        oldest_available_age=max((a for a, _ in ages.values() if a is not None), default=None),
        oldest_lease_age=max((b for _, b in ages.values() if b is not None), default=None),
        queue_ages={
            q: QueueAges(oldest_available_age=a, oldest_lease_age=b) for q, (a, b) in ages.items()
        },
        dead_rows=dead,
        expired=expired or {},
        limited=limited or {},
    )


def test_gauges_add_up_tenants_and_take_each_queue_s_oldest_age() -> None:
    metrics = Metrics(CATALOG, process=False)
    assert of(samples(metrics), "ket_jobs") == {}  # nothing read yet: no value, not a zero
    metrics.publish(
        {
            "acme": stats(
                {("available", "default"): 5, ("executing", "mail"): 1, ("available", "old"): 2},
                {"default": (12.5, None), "mail": (None, 7.0), "old": (99.0, None)},
                dead=10,
                expired={"mail": 2, "old": 1},
                limited={"mail": 3},
            ),
            "globex": stats(
                {("available", "default"): 3}, {"default": (40.0, 2.0)}, dead=5, expired={"mail": 4}
            ),
        }
    )
    found = samples(metrics)
    jobs = of(found, "ket_jobs")
    assert jobs[labels(queue="default", state="available")] == 8
    assert jobs[labels(queue="mail", state="executing")] == 1
    assert jobs[labels(queue="other", state="available")] == 2
    assert jobs[labels(queue="mail", state="completed")] == 0  # every declared queue and state
    assert len(jobs) == 2 * 7 + 1
    assert of(found, "ket_jobs_oldest_available_age_seconds") == {
        labels(queue="default"): 40.0,
        labels(queue="mail"): 0.0,  # none waiting: 0, not a missing series
        labels(queue="other"): 99.0,
    }
    assert of(found, "ket_jobs_oldest_lease_age_seconds") == {
        labels(queue="default"): 2.0,
        labels(queue="mail"): 7.0,
        labels(queue="other"): 0.0,
    }
    assert of(found, "ket_jobs_expired") == {
        labels(queue="default"): 0,  # every declared queue has a series
        labels(queue="mail"): 6,
        labels(queue="other"): 1,
    }
    assert of(found, "ket_jobs_limited") == {
        labels(queue="default"): 0,
        labels(queue="mail"): 3,
    }
    assert of(found, "ket_jobs_dead_rows") == {labels(): 15}


def test_gauges_by_tenant_when_asked() -> None:
    metrics = Metrics(CATALOG, tenant_labels=True, process=False)
    metrics.publish(
        {
            "acme": stats({("available", "default"): 5}, {"default": (12.5, None)}),
            "globex": stats({}, {}),
        }
    )
    found = samples(metrics)
    assert of(found, "ket_jobs")[labels(tenant="acme", queue="default", state="available")] == 5
    assert of(found, "ket_jobs")[labels(tenant="globex", queue="default", state="available")] == 0
    assert of(found, "ket_jobs_oldest_available_age_seconds") == {
        labels(tenant="acme", queue="default"): 12.5,
        labels(tenant="acme", queue="mail"): 0.0,
        labels(tenant="globex", queue="default"): 0.0,
        labels(tenant="globex", queue="mail"): 0.0,
    }
    assert of(found, "ket_jobs_dead_rows") == {}  # SQLite keeps no count: no series


def test_exposition_speaks_openmetrics_when_asked_and_carries_process_metrics() -> None:
    metrics = Metrics(CATALOG)
    body, content_type = metrics.exposition("application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    text, plain = metrics.exposition(None)
    assert plain.startswith("text/plain")
    assert b"\nprocess_cpu_seconds_total " in text


def test_every_declared_series_starts_at_zero() -> None:
    found = samples(Metrics(CATALOG, process=False))
    jobs = {"shop.ship": "default", "shop.mail": "mail", "shop.tick": "default"}
    outcomes = ("completed", "failed", "discarded", "cancelled", "snoozed", "handed_back")
    attempts = of(found, "ket_job_attempts_total")
    for job, queue in jobs.items():
        for outcome in (*outcomes, "lease_lost"):
            assert attempts[labels(queue=queue, job=job, outcome=outcome)] == 0
        assert of(found, "ket_job_duration_seconds_count")[labels(queue=queue, job=job)] == 0
        assert of(found, "ket_jobs_enqueued_total")[labels(queue=queue, job=job)] == 0
        assert of(found, "ket_jobs_rescued_total")[labels(queue=queue, job=job)] == 0
    assert len(attempts) == 3 * 7
    assert of(found, "ket_schedule_fires_total") == {labels(job="shop.tick"): 0}
    assert of(found, "ket_poll_failures_total") == {
        labels(queue="default"): 0,
        labels(queue="mail"): 0,
    }


def test_enqueues_are_counted_by_queue_and_job() -> None:
    hooks = Hooks()
    metrics = Metrics(CATALOG, process=False)
    metrics.subscribe(hooks)
    for name, queue in (("shop.mail", "mail"), ("shop.mail", "mail"), ("shop.gone", "default")):
        hooks.emit(Event(kind="enqueued", tenant="acme", job_id=1, name=name, queue=queue))
    assert counted(samples(metrics), "ket_jobs_enqueued_total") == {
        labels(queue="mail", job="shop.mail"): 2,
        labels(queue="default", job="other"): 1,
    }


def test_ket_info_names_the_version_and_the_manifest_and_slots_are_read_at_scrape() -> None:
    metrics = Metrics(CATALOG, process=False, manifest="0123456789ab")
    running = {("acme", "mail"): (1, 4), ("globex", "mail"): (3, 4), ("acme", "default"): (0, 2)}
    metrics.watch_slots(lambda: running)
    found = samples(metrics)
    [(info, value)] = of(found, "ket_info").items()
    assert value == 1 and dict(info)["manifest"] == "0123456789ab" and dict(info)["version"]
    assert of(found, "ket_worker_slots") == {labels(queue="mail"): 8, labels(queue="default"): 2}
    assert of(found, "ket_worker_slots_busy") == {
        labels(queue="mail"): 4,
        labels(queue="default"): 0,
    }
    running[("acme", "default")] = (2, 2)
    assert of(samples(metrics), "ket_worker_slots_busy")[labels(queue="default")] == 2


def test_ket_worker_manifests_counts_the_manifests_of_the_live_workers_in_the_roster() -> None:
    metrics = Metrics(CATALOG, process=False)
    see = metrics.watch_manifests()
    assert of(samples(metrics), "ket_worker_manifests") == {}  # no report yet: no sample
    started = datetime(2030, 1, 15, tzinfo=UTC)

    def seen(n: int, manifest: str, ago: float) -> SeenWorker:
        info = WorkerInfo(
            id=f"w{n}",
            host="h",
            pid=n,
            started_at=started,
            tenants=None,
            version="1",
            manifest_hash=manifest,
            interval_seconds=5.0,
        )
        return SeenWorker(info=info, last_seen_at=started, seen_seconds_ago=ago)

    workers = [seen(1, "aaa", 1.0), seen(2, "aaa", 2.0), seen(3, "bbb", 1.0)]
    see(workers[0].info, workers)
    assert of(samples(metrics), "ket_worker_manifests") == {frozenset(): 2}
    stale = [*workers[:2], seen(3, "bbb", 600.0)]  # gone: no longer counted
    see(stale[0].info, stale)
    assert of(samples(metrics), "ket_worker_manifests") == {frozenset(): 1}


def test_a_process_that_runs_no_job_lists_none_of_the_worker_s_metrics() -> None:
    names = {name for name, _ in samples(Metrics(CATALOG, process=False, worker=False))}
    assert "ket_info" in names and "ket_jobs" not in names  # no stats read yet: no samples
    worker_only = ("ket_job_attempts_total", "ket_job_duration_seconds_count", "ket_poll_failures")
    assert not any(name.startswith(worker_only) for name in names), names
    assert not any("enqueued" in name or "schedule" in name for name in names), names


def test_every_metric_the_shipped_dashboard_and_alerts_name_is_exported() -> None:
    docs = Path(__file__).resolve().parents[3] / "docs"
    dashboard = json.loads((docs / "grafana-dashboard.json").read_text())
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = yaml.safe_load((docs / "prometheus-alerts.yml").read_text())
    expressions += [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    named = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for expression in expressions
        for name in re.findall(r"\bket_[a-z_]+", expression)
    }
    assert len(named) >= 15, named  # the test reads what it means to
    worker = Metrics(CATALOG, process=False, manifest="0123456789ab")
    worker.watch_slots(lambda: {("acme", "mail"): (1, 4)})
    worker.watch_manifests()
    worker.publish({"acme": stats({("available", "mail"): 1}, {"mail": (1.0, None)}, dead=3)})
    server = Metrics(CATALOG, process=False, worker=False)
    RequestCounts(server.registry, CATALOG)
    exported = {
        family.name for metrics in (worker, server) for family in metrics.registry.collect()
    }
    assert named - exported == set()
