"""What the worker roster's rows add up to: the manifests live workers run, the queues none
serves."""

from __future__ import annotations

from datetime import UTC, datetime

from ket.store.roster import SeenWorker, WorkerInfo, manifest_counts, unserved_queues

DECLARED = ["default", "mail", "reports"]


def seen(
    worker_id: str,
    queues: dict[str, int],
    *,
    tenants: tuple[str, ...] | None = None,
    ago: float = 1.0,
    manifest: str = "a" * 64,
) -> SeenWorker:
    now = datetime.now(UTC)
    info = WorkerInfo(
        id=worker_id,
        host="vm",
        pid=1,
        started_at=now,
        tenants=tenants,
        queues=queues,
        version="0.1.0",
        manifest_hash=manifest,
        interval_seconds=2.0,
    )
    return SeenWorker(info=info, last_seen_at=now, seen_seconds_ago=ago)


def test_a_queue_every_live_worker_leaves_out_is_unserved() -> None:
    workers = [seen("w1", {"mail": 4}), seen("w2", {"mail": 2, "reports": 1})]
    assert unserved_queues(DECLARED, workers) == ["default"]
    assert unserved_queues(DECLARED, [*workers, seen("w3", {"default": 1})]) == []


def test_a_stale_or_stopping_worker_serves_nothing() -> None:
    workers = [
        seen("live", {"mail": 4}),
        seen("stale", {"default": 2, "reports": 1}, ago=7.0),  # past three intervals of 2 s
        seen("stopping", {"default": 2, "reports": 1}, tenants=()),
    ]
    assert unserved_queues(DECLARED, workers) == ["default", "reports"]


def test_no_worker_serves_no_queue() -> None:
    assert unserved_queues(DECLARED, []) == DECLARED


def test_for_one_tenant_only_the_workers_serving_it_count() -> None:
    workers = [seen("all", {"mail": 4}), seen("globex", {"default": 1}, tenants=("globex",))]
    assert unserved_queues(DECLARED, workers, tenant="acme") == ["default", "reports"]
    assert unserved_queues(DECLARED, workers, tenant="globex") == ["reports"]
    assert unserved_queues(DECLARED, workers) == ["reports"]


def test_manifest_counts_count_live_workers_most_common_first() -> None:
    workers = [
        seen("w1", {}, manifest="b" * 64),
        seen("w2", {}, manifest="a" * 64),
        seen("w3", {}, manifest="a" * 64),
        seen("w4", {}, manifest="c" * 64, ago=60.0),
    ]
    assert manifest_counts(workers) == {"a" * 64: 2, "b" * 64: 1}
