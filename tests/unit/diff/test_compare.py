"""diff_manifests: set arithmetic on every kind of entry, worker settings, and coverage."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import BaseModel

from ket.diff import diff_manifests
from ket.manifest.model import (
    JobEntry,
    Manifest,
    ModelEntry,
    ModuleEntry,
    ScheduleEntry,
    WorkerEntry,
)

from .build import WORKER, change, function, job, manifest

JOB_REMOVED = "job removed; rows already queued under this name could no longer run"


def test_identical_manifests_have_no_changes() -> None:
    old = manifest(jobs={"sales.send": job()}, functions={"sales.confirm": function()})
    new = manifest(jobs={"sales.send": job()}, functions={"sales.confirm": function()})
    assert diff_manifests(old, new) == []


def test_removed_job_is_breaking() -> None:
    old = manifest(jobs={"sales.send": job(), "sales.audit": job()})
    new = manifest(jobs={"sales.audit": job()})
    assert diff_manifests(old, new) == [
        change("breaking", "job_removed", "job sales.send", JOB_REMOVED, old=job()),
    ]


def test_renamed_job_is_a_breaking_removal_plus_a_safe_addition() -> None:
    old = manifest(jobs={"sales.send": job()})
    new = manifest(jobs={"sales.send_mail": job()})
    assert diff_manifests(old, new) == [
        change("breaking", "job_removed", "job sales.send", JOB_REMOVED, old=job()),
        change("safe", "job_added", "job sales.send_mail", "job added", new=job()),
    ]


def test_removed_function_is_for_review() -> None:
    old = manifest(functions={"sales.confirm": function()}, modules=("sales",))
    new = manifest(modules=("sales",))
    assert diff_manifests(old, new) == [
        change(
            "review",
            "function_removed",
            "function sales.confirm",
            "function removed; code that calls it breaks, though no queued row names it",
            old=function(),
        ),
    ]


def test_added_function_is_safe() -> None:
    old = manifest(modules=("sales",))
    new = manifest(functions={"sales.confirm": function()})
    assert diff_manifests(old, new) == [
        change(
            "safe", "function_added", "function sales.confirm", "function added", new=function()
        ),
    ]


def test_removed_model_is_for_review_and_added_model_is_safe() -> None:
    old = manifest(models={"sales.Order": {"number": "string"}})
    new = manifest(models={"sales.Invoice": {"number": "string"}})
    assert diff_manifests(old, new) == [
        change(
            "review",
            "model_removed",
            "model sales.Order",
            "model removed; the tenant tables keep its rows",
            old={"fields": {"number": "string"}},
        ),
        change(
            "safe",
            "model_added",
            "model sales.Invoice",
            "model added",
            new={"fields": {"number": "string"}},
        ),
    ]


def test_removed_model_field_and_changed_field_type_are_for_review() -> None:
    old = manifest(models={"sales.Order": {"number": "string", "total": "int", "note": "string"}})
    new = manifest(
        models={"sales.Order": {"number": "string", "total": "number", "email": "string"}}
    )
    assert diff_manifests(old, new) == [
        change(
            "review",
            "model_field_removed",
            "model sales.Order",
            "field 'note' removed; the tenant tables keep the column and its data",
            old="string",
        ),
        change(
            "review",
            "model_field_type_changed",
            "model sales.Order",
            "field 'total' changes type from int to number; data already stored may not fit",
            old="int",
            new="number",
        ),
        change(
            "safe",
            "model_field_added",
            "model sales.Order",
            "field 'email' added (string)",
            new="string",
        ),
    ]


def test_added_module_and_its_members_are_each_safe() -> None:
    old = manifest(modules=("sales",))
    new = manifest(modules=("sales",), jobs={"hotel.audit": job()})
    assert diff_manifests(old, new) == [
        change("safe", "job_added", "job hotel.audit", "job added", new=job()),
        change("safe", "module_added", "module hotel", "module added"),
    ]


def test_removed_module_reports_its_members_on_their_own() -> None:
    old = manifest(modules=("sales",), jobs={"hotel.audit": job()})
    new = manifest(modules=("sales",))
    assert diff_manifests(old, new) == [
        change("breaking", "job_removed", "job hotel.audit", JOB_REMOVED, old=job()),
        change(
            "safe",
            "module_removed",
            "module hotel",
            "module removed; its jobs, functions and models are reported on their own",
        ),
    ]


def test_removed_queue_is_breaking() -> None:
    old = manifest()
    new = manifest(worker={"queues": {"default": 2}})
    assert diff_manifests(old, new) == [
        change(
            "breaking",
            "queue_removed",
            "queue mail",
            "queue removed from worker.queues; rows already queued on it would never be claimed",
            old=4,
        ),
    ]


def test_added_queue_and_changed_concurrency_are_safe() -> None:
    old = manifest()
    new = manifest(worker={"queues": {"default": 8, "mail": 4, "reports": 1}})
    assert diff_manifests(old, new) == [
        change(
            "safe",
            "queue_concurrency_changed",
            "queue default",
            "concurrency changed from 2 to 8",
            old=2,
            new=8,
        ),
        change("safe", "queue_added", "queue reports", "queue added with concurrency 1", new=1),
    ]


def test_lowered_lease_is_for_review() -> None:
    old = manifest()
    new = manifest(worker={"lease_ms": 10000})
    assert diff_manifests(old, new) == [
        change(
            "review",
            "lease_ms_lowered",
            "worker.lease_ms",
            "lease_ms lowered from 30000 to 10000; "
            "a worker that misses heartbeats that long loses its jobs to rescue sooner",
            old=30000,
            new=10000,
        ),
    ]


def test_lowered_shutdown_grace_is_for_review() -> None:
    old = manifest()
    new = manifest(worker={"shutdown_grace_ms": 5000})
    assert diff_manifests(old, new) == [
        change(
            "review",
            "shutdown_grace_ms_lowered",
            "worker.shutdown_grace_ms",
            "shutdown_grace_ms lowered from 15000 to 5000; "
            "running jobs get less time to finish before shutdown aborts them",
            old=15000,
            new=5000,
        ),
    ]


def test_raised_lease_and_other_worker_settings_are_safe() -> None:
    old = manifest()
    new = manifest(worker={"lease_ms": 60000, "poll_min_ms": 100})
    assert diff_manifests(old, new) == [
        change(
            "safe",
            "worker_setting_changed",
            "worker.lease_ms",
            "lease_ms raised from 30000 to 60000",
            old=30000,
            new=60000,
        ),
        change(
            "safe",
            "worker_setting_changed",
            "worker.poll_min_ms",
            "poll_min_ms changed from 50 to 100",
            old=50,
            new=100,
        ),
    ]


def test_renamed_deployment_is_safe() -> None:
    old = manifest(modules=("sales",))
    new = manifest(modules=("sales",), deployment="erp2")
    assert diff_manifests(old, new) == [
        change(
            "safe",
            "deployment_renamed",
            "deployment",
            "deployment renamed from erp to erp2",
            old="erp",
            new="erp2",
        ),
    ]


def test_changes_come_breaking_first_then_by_subject_and_kind() -> None:
    old = manifest(jobs={f"sales.j{i}": job() for i in range(6)}, models={"sales.Order": {}})
    new = manifest(
        jobs={
            "sales.j9": job(),
            "sales.j3": job(effects=["transport:send"]),
            "sales.j1": job(max_attempts=3, priority=1),
            "sales.j0": job(priority=3),
        },
        worker={"queues": {"default": 2}},
    )
    assert [(c.severity, c.kind, c.subject) for c in diff_manifests(old, new)] == [
        ("breaking", "job_removed", "job sales.j2"),
        ("breaking", "job_removed", "job sales.j4"),
        ("breaking", "job_removed", "job sales.j5"),
        ("breaking", "queue_removed", "queue mail"),
        ("review", "max_attempts_lowered", "job sales.j1"),
        ("review", "effects_widened", "job sales.j3"),
        ("review", "model_removed", "model sales.Order"),
        ("safe", "priority_changed", "job sales.j0"),
        ("safe", "priority_changed", "job sales.j1"),
        ("safe", "job_added", "job sales.j9"),
    ]


def test_order_does_not_depend_on_the_order_entries_were_declared_in() -> None:
    jobs = {f"sales.j{i}": job(priority=i) for i in range(8)}
    changed = {name: job(priority=9, queue="mail") for name in jobs}
    shuffled = dict(random.Random(7).sample(sorted(jobs.items()), k=len(jobs)))
    assert list(shuffled) != list(jobs)
    forward = diff_manifests(manifest(jobs=jobs), manifest(jobs=changed))
    backward = diff_manifests(
        manifest(jobs=shuffled), manifest(jobs=dict(reversed(changed.items())))
    )
    assert forward == backward
    assert len(forward) == 16


# A field the rules do not know yet (a future manifest field) must still be reported, as safe.
class NovelManifest(Manifest):
    novelty: int = 0


class NovelModule(ModuleEntry):
    novelty: int = 0


class NovelJob(JobEntry):
    novelty: int = 0


class NovelModel(ModelEntry):
    novelty: int = 0


class NovelSchedule(ScheduleEntry):
    novelty: int = 0


class NovelWorker(WorkerEntry):
    novelty: int = 0


def _with_novelty(where: str, value: int) -> Manifest:
    base = manifest(
        jobs={"sales.send": job(schedule={"every": "15m", "fingerprint": "f1"})},
        models={"sales.Order": {"number": "string"}},
    )
    module, send = base.modules["sales"], base.modules["sales"].jobs["send"]
    assert send.schedule is not None
    replace: dict[str, Any] = {
        "manifest": lambda: NovelManifest(**dict(base), novelty=value),
        "worker": lambda: base.model_copy(
            update={"worker": NovelWorker(**dict(base.worker), novelty=value)}
        ),
        "module": lambda: _with_module(base, NovelModule(**dict(module), novelty=value)),
        "job": lambda: _with_module(
            base,
            module.model_copy(update={"jobs": {"send": NovelJob(**dict(send), novelty=value)}}),
        ),
        "schedule": lambda: _with_module(
            base,
            module.model_copy(
                update={
                    "jobs": {
                        "send": send.model_copy(
                            update={"schedule": NovelSchedule(**dict(send.schedule), novelty=value)}
                        )
                    }
                }
            ),
        ),
        "model": lambda: _with_module(
            base,
            module.model_copy(
                update={
                    "models": {"Order": NovelModel(**dict(module.models["Order"]), novelty=value)}
                }
            ),
        ),
    }
    built: Manifest = replace[where]()
    return built


def _with_module(base: Manifest, module: BaseModel) -> Manifest:
    return base.model_copy(update={"modules": {"sales": module}})


@pytest.mark.parametrize(
    ("where", "subject", "name"),
    [
        ("manifest", "novelty", "novelty"),
        ("worker", "worker.novelty", "novelty"),
        ("module", "module sales", "novelty"),
        ("job", "job sales.send", "novelty"),
        ("model", "model sales.Order", "novelty"),
        ("schedule", "job sales.send", "schedule"),
    ],
)
def test_a_field_no_rule_knows_is_still_reported_as_safe(
    where: str, subject: str, name: str
) -> None:
    changes = diff_manifests(_with_novelty(where, 1), _with_novelty(where, 2))
    message = "novelty changed from 1 to 2" if name == "novelty" else "schedule changed"
    assert [(c.severity, c.kind, c.subject, c.message) for c in changes] == [
        ("safe", "field_changed", subject, message)
    ]


# Every field of every entry, changed on its own, gives at least one change: a new model field
# without an entry here fails the test, so whoever adds it decides how it is classified.
PERTURBED_JOB: dict[str, Any] = {
    "handler": "app.sales:send_v2",
    "input": {"type": "object", "properties": {"x": {"type": "integer"}}},
    "effects": ["transport:send"],
    "cross_company": True,
    "queue": "mail",
    "idempotent": False,
    "max_attempts": 3,
    "timeout_ms": 1000,
    "priority": 5,
    "backoff": "custom",
    "schedule": {"every": "15m", "fingerprint": "f1"},
    "input_version": 2,
    "upgrades_from": [1],
    "tags": ["billing"],
    "expires_in": "10m",
    "concurrency_limit": {"limit": 3},
    "rate_limit": {"limit": 20, "period": "1s", "key": ["x"]},
    "unique": {"period": "1h", "states": ["completed"]},
    "debounce": {"period": "30s"},
    "output": {"type": "object", "properties": {"y": {"type": "integer"}}},
}
PERTURBED_WORKER: dict[str, Any] = {name: 1 for name in WORKER} | {
    "queues": {"default": 2},
    "retention_ms": {"completed": 1, "discarded": None, "cancelled": 1},
    "limits": {"default": {"concurrency_limit": {"limit": 1}}},
}


def test_the_perturbation_tables_cover_every_field_of_the_entries() -> None:
    assert set(PERTURBED_JOB) == set(JobEntry.model_fields)
    assert set(PERTURBED_WORKER) == set(WorkerEntry.model_fields)


@pytest.mark.parametrize("name", sorted(PERTURBED_JOB))
def test_any_changed_job_field_gives_a_change(name: str) -> None:
    old = manifest(jobs={"sales.send": job()})
    new = manifest(jobs={"sales.send": job(**{name: PERTURBED_JOB[name]})})
    assert diff_manifests(old, new) != []
    assert {c.subject for c in diff_manifests(old, new)} == {"job sales.send"}


@pytest.mark.parametrize("name", sorted(PERTURBED_JOB.keys() & set(function())))
def test_any_changed_function_field_gives_a_change(name: str) -> None:
    old = manifest(functions={"sales.confirm": function()})
    new = manifest(functions={"sales.confirm": function(**{name: PERTURBED_JOB[name]})})
    assert {c.subject for c in diff_manifests(old, new)} == {"function sales.confirm"}


@pytest.mark.parametrize("name", sorted(PERTURBED_WORKER))
def test_any_changed_worker_field_gives_a_change(name: str) -> None:
    new = manifest(worker={name: PERTURBED_WORKER[name]})
    assert diff_manifests(manifest(), new) != []
