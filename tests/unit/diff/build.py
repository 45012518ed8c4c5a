"""Small manifests for diff tests: one helper builds a Manifest from the parts a test names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, create_model
from pydantic.config import ExtraValues

from ket.diff import Change, Severity
from ket.manifest.model import Manifest

WORKER: dict[str, Any] = {
    "queues": {"default": 2, "mail": 4},
    "poll_min_ms": 50,
    "poll_max_ms": 2000,
    "tenant_refresh_ms": 30000,
    "lease_ms": 30000,
    "shutdown_grace_ms": 15000,
    "schedule_sweep_ms": 30000,
    "retention_ms": {"completed": 604800000, "discarded": 604800000, "cancelled": 604800000},
}


def schema(
    title: str = "sales.send", /, *, extra: ExtraValues = "forbid", **fields: Any
) -> dict[str, Any]:
    """The JSON schema pydantic generates for an input model with `fields` (create_model style)."""
    model = create_model(title, __config__=ConfigDict(extra=extra, title=title), **fields)
    generated: dict[str, Any] = model.model_json_schema()
    return generated


def job(**overrides: Any) -> dict[str, Any]:
    """A job entry as it appears in a manifest, every option at its default unless overridden."""
    entry: dict[str, Any] = {
        "handler": "app.sales:send",
        "input": schema(),
        "effects": [],
        "cross_company": False,
        "queue": "default",
        "idempotent": True,
        "max_attempts": 20,
        "timeout_ms": 300000,
        "priority": 0,
        "backoff": "default",
        "schedule": None,
        "input_version": 1,
    }
    return {**entry, **overrides}


def function(**overrides: Any) -> dict[str, Any]:
    """A function entry as it appears in a manifest."""
    entry = {
        "handler": "app.sales:confirm",
        "input": schema(),
        "effects": [],
        "cross_company": False,
    }
    return {**entry, **overrides}


def manifest(
    *,
    jobs: Mapping[str, Mapping[str, Any]] | None = None,
    functions: Mapping[str, Mapping[str, Any]] | None = None,
    models: Mapping[str, Mapping[str, str]] | None = None,
    modules: tuple[str, ...] = (),
    worker: Mapping[str, Any] | None = None,
    deployment: str = "erp",
) -> Manifest:
    """A manifest holding the members given by qualified name ("sales.send"), plus `modules`."""
    found: dict[str, dict[str, dict[str, Any]]] = {
        name: {"models": {}, "functions": {}, "jobs": {}} for name in modules
    }
    members = [
        ("jobs", jobs or {}),
        ("functions", functions or {}),
        ("models", {name: {"fields": dict(f)} for name, f in (models or {}).items()}),
    ]
    for group, entries in members:
        for qualified, entry in entries.items():
            module, name = qualified.split(".")
            found.setdefault(module, {"models": {}, "functions": {}, "jobs": {}})[group][name] = (
                entry
            )
    return Manifest.model_validate(
        {
            "format": 1,
            "deployment": deployment,
            "modules": found,
            "worker": {**WORKER, **(worker or {})},
        }
    )


def change(
    severity: Severity,
    kind: str,
    subject: str,
    message: str,
    old: object = None,
    new: object = None,
) -> Change:
    """A Change, positionally: keeps expected lists in tests short."""
    return Change(severity=severity, kind=kind, subject=subject, message=message, old=old, new=new)
