"""Compare two manifests: set arithmetic on every kind of entry, then field rules on the rest."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel

from ket.diff.change import Change, Severity, ordered
from ket.diff.field import FieldRule, dump, field_changed, field_findings
from ket.diff.flow import (
    debounce_findings,
    expiry_findings,
    job_limit_findings,
    queue_limit_findings,
    unique_findings,
)
from ket.diff.operation import FUNCTION_RULES, JOB_RULES, QUEUED, bound, changed
from ket.diff.rule import Finding, classify
from ket.diff.schema import input_findings
from ket.manifest.model import JobEntry, Manifest, QueueLimitsEntry, ServeEntry, WorkerEntry


@dataclass(frozen=True, kw_only=True)
class Family:
    """How one kind of named entry (module, job, function, model) is compared."""

    noun: str
    removed: str
    rules: Mapping[str, FieldRule] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    ceiling: Severity = "breaking"
    carries_entry: bool = True


def diff_manifests(old: Manifest, new: Manifest) -> list[Change]:
    """Every difference between two manifests, classified: breaking, then review, then safe.

    Example: ``has_breaking(diff_manifests(read_manifest("manifests/erp.yaml"), current))``
    """
    changes = [
        *_manifest(old, new),
        *_family(MODULES, old.modules, new.modules),
        *_family(JOBS, old.jobs(), new.jobs()),
        *_job_inputs(old.jobs(), new.jobs()),
        *_job_flow(old.jobs(), new.jobs()),
        *_family(FUNCTIONS, old.functions(), new.functions()),
        *_family(MODELS, old.models(), new.models()),
        *_queues(old.worker.queues, new.worker.queues),
        *_queue_limits(old.worker, new.worker),
        *_worker(old.worker, new.worker),
        *_serve(old.serve or NO_SERVE, new.serve or NO_SERVE),
    ]
    return ordered(changes)


def _family(
    family: Family, old: Mapping[str, BaseModel], new: Mapping[str, BaseModel]
) -> Iterator[Change]:
    noun = family.noun
    for name in sorted(new.keys() - old.keys()):
        entry = dump(new[name]) if family.carries_entry else None
        finding = Finding(kind=f"{noun}_added", message=f"{noun} added", new=entry)
        yield classify(f"{noun} {name}", finding)
    for name in sorted(old.keys() - new.keys()):
        entry = dump(old[name]) if family.carries_entry else None
        finding = Finding(kind=f"{noun}_removed", message=family.removed, old=entry)
        yield classify(f"{noun} {name}", finding)
    for name in sorted(old.keys() & new.keys()):
        for _, finding in field_findings(old[name], new[name], family.rules, skip=family.skip):
            yield classify(f"{noun} {name}", finding, ceiling=family.ceiling)


def _job_inputs(old: Mapping[str, JobEntry], new: Mapping[str, JobEntry]) -> Iterator[Change]:
    """A job's input and its version, together: an input change that raises the version with an
    upgrade from the old one cannot strand a queued row (each is upgraded as it runs), so it is
    safe; without one, what it would break is breaking."""
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        subject = f"job {name}"
        was, now = before.input_version, after.input_version
        upgraded = now > was and was in after.upgrades_from
        if now > was and upgraded:
            message = (
                f"input version raised from {was} to {now}; rows already queued at version "
                f"{was} are upgraded as they run"
            )
            yield classify(
                subject, Finding(kind="input_version_raised", message=message, old=was, new=now)
            )
        elif now > was:
            message = (
                f"input version raised from {was} to {now} with no upgrade from version {was}; "
                f"rows already queued at version {was} would be discarded"
            )
            finding = Finding(
                kind="input_version_raised_without_upgrade", message=message, old=was, new=now
            )
            yield classify(subject, finding)
        elif now < was:
            message = (
                f"input version lowered from {was} to {now}; rows already queued at version "
                f"{was} are left for a worker of a newer deployment"
            )
            yield classify(
                subject, Finding(kind="input_version_lowered", message=message, old=was, new=now)
            )
        findings = input_findings(before.input, after.input, who=QUEUED)
        if not findings and before.input != after.input:  # a title-only edit: still reported
            findings = [field_changed("input", before.input, after.input)]
        for finding in findings:
            yield classify(subject, finding, ceiling="safe" if upgraded else "breaking")
        yield from _upgrades(subject, before, after)


def _upgrades(subject: str, before: JobEntry, after: JobEntry) -> Iterator[Change]:
    """Upgrades dropped (review: rows still queued at those versions would be discarded) or
    added other than the step a raised version needs (safe)."""
    removed = sorted(set(before.upgrades_from) - set(after.upgrades_from))
    needed = set(range(before.input_version, after.input_version))
    added = sorted(set(after.upgrades_from) - set(before.upgrades_from) - needed)
    if removed:
        listed = ", ".join(str(v) for v in removed)
        message = (
            f"upgrade from input version {listed} removed; rows still queued at that version "
            "would be discarded"
        )
        finding = Finding(
            kind="input_upgrade_removed",
            message=message,
            old=before.upgrades_from,
            new=after.upgrades_from,
        )
        yield classify(subject, finding)
    if added:
        message = f"upgrade from input version {', '.join(str(v) for v in added)} added"
        finding = Finding(
            kind="input_upgrade_added",
            message=message,
            old=before.upgrades_from,
            new=after.upgrades_from,
        )
        yield classify(subject, finding)


def _queues(old: Mapping[str, int], new: Mapping[str, int]) -> Iterator[Change]:
    for name in sorted(new.keys() - old.keys()):
        message = f"queue added with concurrency {new[name]}"
        yield classify(f"queue {name}", Finding(kind="queue_added", message=message, new=new[name]))
    for name in sorted(old.keys() - new.keys()):
        message = (
            "queue removed from worker.queues; rows already queued on it would never be claimed"
        )
        yield classify(
            f"queue {name}", Finding(kind="queue_removed", message=message, old=old[name])
        )
    for name in sorted(name for name in old.keys() & new.keys() if old[name] != new[name]):
        message = f"concurrency changed from {old[name]} to {new[name]}"
        finding = Finding(
            kind="queue_concurrency_changed", message=message, old=old[name], new=new[name]
        )
        yield classify(f"queue {name}", finding)


def _queue_limits(old: WorkerEntry, new: WorkerEntry) -> Iterator[Change]:
    """The limits of the queues in both (a queue added or removed is reported as such)."""
    for name in sorted(old.queues.keys() & new.queues.keys()):
        before = old.limits.get(name, NO_LIMITS)
        after = new.limits.get(name, NO_LIMITS)
        for finding in queue_limit_findings(before, after):
            yield classify(f"queue {name}", finding)


def _job_flow(old: Mapping[str, JobEntry], new: Mapping[str, JobEntry]) -> Iterator[Change]:
    """A job's expiry, limits, uniqueness window and debounce, compared with their durations
    read (see diff.flow)."""
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        findings = [
            *expiry_findings(before, after),
            *job_limit_findings(before, after),
            *unique_findings(before.unique, after.unique),
            *debounce_findings(before.debounce, after.debounce),
        ]
        for finding in findings:
            yield classify(f"job {name}", finding)


def _worker(old: WorkerEntry, new: WorkerEntry) -> Iterator[Change]:
    for name, finding in field_findings(old, new, WORKER_RULES, skip={"queues", "limits"}):
        yield classify(f"worker.{name}", finding)


def _serve(old: ServeEntry, new: ServeEntry) -> Iterator[Change]:
    for name, finding in field_findings(old, new, SERVE_RULES):
        yield classify(f"serve.{name}", finding)


def _manifest(old: Manifest, new: Manifest) -> Iterator[Change]:
    skip = {"modules", "worker", "serve"}
    for name, finding in field_findings(old, new, MANIFEST_RULES, skip=skip):
        yield classify(name, finding)


def _model_fields(old: dict[str, str], new: dict[str, str]) -> list[Finding]:
    found: list[Finding] = []
    for name in sorted(new.keys() - old.keys()):
        message = f"field {name!r} added ({new[name]})"
        found.append(Finding(kind="model_field_added", message=message, new=new[name]))
    for name in sorted(old.keys() - new.keys()):
        message = f"field {name!r} removed; the tenant tables keep the column and its data"
        found.append(Finding(kind="model_field_removed", message=message, old=old[name]))
    for name in sorted(name for name in old.keys() & new.keys() if old[name] != new[name]):
        message = (
            f"field {name!r} changes type from {old[name]} to {new[name]}; "
            "data already stored may not fit"
        )
        finding = Finding(
            kind="model_field_type_changed", message=message, old=old[name], new=new[name]
        )
        found.append(finding)
    return found


MODULES = Family(
    noun="module",
    removed="module removed; its jobs, functions and models are reported on their own",
    skip=frozenset({"models", "functions", "jobs"}),
    carries_entry=False,
)
JOBS = Family(
    noun="job",
    removed="job removed; rows already queued under this name could no longer run",
    rules=JOB_RULES,
    # see _job_inputs and _job_flow
    skip=frozenset(
        {
            *("input", "input_version", "upgrades_from"),
            *("expires_in", "concurrency_limit", "rate_limit", "unique", "debounce"),
        }
    ),
)
# No queued row names a function, so what breaks its callers is for review, never breaking.
FUNCTIONS = Family(
    noun="function",
    removed="function removed; code that calls it breaks, though no queued row names it",
    rules=FUNCTION_RULES,
    ceiling="review",
)
MODELS = Family(
    noun="model",
    removed="model removed; the tenant tables keep its rows",
    rules={"fields": _model_fields},
)

WORKER_RULES: Mapping[str, FieldRule] = {
    **{
        name: changed("worker_setting_changed", name)
        for name in WorkerEntry.model_fields
        if name not in ("queues", "limits")
    },
    "lease_ms": bound(
        "lease_ms",
        "a worker that misses heartbeats that long loses its jobs to rescue sooner",
        raised_kind="worker_setting_changed",
    ),
    "shutdown_grace_ms": bound(
        "shutdown_grace_ms",
        "running jobs get less time to finish before shutdown aborts them",
        raised_kind="worker_setting_changed",
    ),
}
# What a queue without limits has.
NO_LIMITS = QueueLimitsEntry()
# What a manifest without `serve` means: the defaults, and no authenticator.
NO_SERVE = ServeEntry.undeclared()
SERVE_RULES: Mapping[str, FieldRule] = {
    **{name: changed("serve_setting_changed", f"serve.{name}") for name in ServeEntry.model_fields},
    # who may call the functions over HTTP is decided elsewhere now: a person should look
    "authenticate": changed("serve_authenticator_changed", "serve.authenticate"),
    "tenant_host": changed("serve_tenant_host_changed", "serve.tenant_host"),
    # who can see and steer jobs over HTTP, and where
    "dashboard": changed("serve_dashboard_changed", "serve.dashboard"),
}
MANIFEST_RULES: Mapping[str, FieldRule] = {
    "deployment": lambda old, new: [
        Finding(
            kind="deployment_renamed",
            message=f"deployment renamed from {old} to {new}",
            old=old,
            new=new,
        )
    ],
}
