"""The rule table: every kind of change ket diff knows, and the severity it carries.

A comparison finds differences as `Finding`s (what changed); this table alone decides how much
they matter, so the classification can be read, reviewed and tested in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ket.diff.change import SEVERITIES, Change, Severity


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One difference found on a subject, before classification."""

    kind: str
    message: str
    old: object = None
    new: object = None


RULES: Mapping[str, Severity] = {
    # Rows already in the queue name jobs, carry inputs and sit on queues: breaking is whatever
    # would leave such a row unable to run.
    "job_removed": "breaking",
    "queue_removed": "breaking",
    "input_schema_replaced": "breaking",
    "input_field_added_required": "breaking",
    "input_field_required": "breaking",
    "input_field_type_changed": "breaking",
    "input_field_removed": "breaking",
    "input_version_raised_without_upgrade": "breaking",
    "input_version_lowered": "breaking",
    # Nothing queued breaks, but a person should look: more power, other timing, less patience,
    # callers or stored data at stake.
    "effects_widened": "review",
    "cross_company_enabled": "review",
    "schedule_added": "review",
    "schedule_removed": "review",
    "schedule_changed": "review",
    "schedule_timezone_changed": "review",
    "max_attempts_lowered": "review",
    "timeout_ms_lowered": "review",
    "job_queue_changed": "review",
    "function_removed": "review",
    "model_removed": "review",
    "model_field_removed": "review",
    "model_field_type_changed": "review",
    "lease_ms_lowered": "review",
    "shutdown_grace_ms_lowered": "review",
    # Who may call the functions over HTTP, or which host names which tenant, changes.
    "serve_authenticator_changed": "review",
    "serve_tenant_host_changed": "review",
    "serve_dashboard_changed": "review",
    # Closing an input schema refuses undeclared fields that queued rows might carry; unlike a
    # removed field we cannot tell whether any do, so a person decides.
    "input_closed": "review",
    # Values of a field that stops being secret will be shown and stored in clear.
    "input_field_not_secret": "review",
    # Rows queued long ago at a version whose upgrade is dropped could no longer run; whether
    # any are left is for a person to know.
    "input_upgrade_removed": "review",
    # Flow control: work that was flowing may now wait (a limit added or tightened, or keyed
    # otherwise than the attempts running now were counted), be discarded (an expiry added or
    # shortened), or stop being held back (a limit removed: what it protected is unprotected).
    "expires_in_added": "review",
    # a reader of the results (a dependant, a tool) may count on them, or on their shape
    "output_removed": "review",
    "output_changed": "review",
    "expires_in_shortened": "review",
    "concurrency_limit_added": "review",
    "concurrency_limit_tightened": "review",
    "concurrency_limit_removed": "review",
    "concurrency_limit_key_changed": "review",
    "rate_limit_added": "review",
    "rate_limit_tightened": "review",
    "rate_limit_reshaped": "review",
    "rate_limit_removed": "review",
    "rate_limit_key_changed": "review",
    # An enqueue that joins an earlier job writes none, so its work is skipped: a uniqueness
    # window added, lengthened, or keyed or stated otherwise skips work that ran, and one removed
    # or shortened lets duplicates run again. A debounce makes jobs wait: added or lengthened,
    # they wait longer; removed, every enqueue runs; re-keyed, enqueues join other jobs. A
    # max_wait removed or lengthened lets a job enqueued again and again wait longer; added or
    # shortened, it runs sooner.
    "unique_added": "review",
    "unique_removed": "review",
    "unique_lengthened": "review",
    "unique_shortened": "review",
    "unique_key_changed": "review",
    "unique_states_changed": "review",
    "debounce_added": "review",
    "debounce_removed": "review",
    "debounce_lengthened": "review",
    "debounce_key_changed": "review",
    "debounce_max_wait_loosened": "review",
    # Everything else that differs.
    "module_added": "safe",
    "module_removed": "safe",
    "job_added": "safe",
    "function_added": "safe",
    "model_added": "safe",
    "model_field_added": "safe",
    "queue_added": "safe",
    "queue_concurrency_changed": "safe",
    "input_field_added": "safe",
    "input_field_optional": "safe",
    "input_field_nullable": "safe",
    "input_field_removed_tolerated": "safe",
    "input_field_annotation_changed": "safe",
    "input_field_secret": "safe",
    "input_opened": "safe",
    "input_version_raised": "safe",
    "input_upgrade_added": "safe",
    "effects_narrowed": "safe",
    "effects_restated": "safe",
    "cross_company_disabled": "safe",
    "max_attempts_raised": "safe",
    "timeout_ms_raised": "safe",
    "priority_changed": "safe",
    "tags_changed": "safe",
    "output_added": "safe",
    "expires_in_removed": "safe",
    "expires_in_lengthened": "safe",
    "expires_in_restated": "safe",
    "concurrency_limit_loosened": "safe",
    "rate_limit_loosened": "safe",
    "rate_limit_restated": "safe",
    "unique_restated": "safe",
    "debounce_shortened": "safe",
    "debounce_max_wait_tightened": "safe",
    "debounce_restated": "safe",
    "backoff_changed": "safe",
    "handler_changed": "safe",
    "idempotent_changed": "safe",
    "schedule_rewritten": "safe",
    "worker_setting_changed": "safe",
    "serve_setting_changed": "safe",
    "deployment_renamed": "safe",
    # The catch-all: a field no rule knows (or a difference its rule has nothing to say about)
    # is still reported, never dropped.
    "field_changed": "safe",
}


def classify(subject: str, finding: Finding, *, ceiling: Severity = "breaking") -> Change:
    """The Change for a finding on a subject, its severity from RULES, capped at `ceiling`."""
    severity = RULES[finding.kind]
    if SEVERITIES.index(severity) < SEVERITIES.index(ceiling):
        severity = ceiling
    return Change(
        severity=severity,
        kind=finding.kind,
        subject=subject,
        message=finding.message,
        old=finding.old,
        new=finding.new,
    )
