"""The serve section of a manifest: who authenticates and which host names which tenant are for
review; other serve options are safe; a manifest without it means no authenticator."""

from __future__ import annotations

from typing import Any

from ket.diff import diff_manifests
from ket.manifest.model import Manifest, ServeEntry

from .build import change, manifest


def served(**options: Any) -> Manifest:
    entry = ServeEntry.undeclared().model_copy(update=options)
    return manifest().model_copy(update={"serve": entry})


def test_an_authenticator_added_or_replaced_is_for_review() -> None:
    assert diff_manifests(manifest(), served(authenticate="app.auth:check")) == [
        change(
            "review",
            "serve_authenticator_changed",
            "serve.authenticate",
            "serve.authenticate changed from null to app.auth:check",
            old=None,
            new="app.auth:check",
        )
    ]
    replaced = diff_manifests(served(authenticate="app.auth:check"), served(authenticate="x:y"))
    assert [(c.severity, c.kind) for c in replaced] == [("review", "serve_authenticator_changed")]


def test_a_changed_tenant_host_is_for_review_and_a_body_cap_is_safe() -> None:
    old = served(authenticate="a:b")
    new = served(authenticate="a:b", tenant_host="{tenant}.example.com", max_body_bytes=5)
    assert [(c.severity, c.kind, c.subject) for c in diff_manifests(old, new)] == [
        ("review", "serve_tenant_host_changed", "serve.tenant_host"),
        ("safe", "serve_setting_changed", "serve.max_body_bytes"),
    ]


def test_declaring_the_defaults_changes_nothing() -> None:
    assert diff_manifests(manifest(), served()) == []
