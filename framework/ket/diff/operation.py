"""Rules for the fields of a common job or function: one function per field, keyed by its name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ket.diff.field import FieldRule, show
from ket.diff.rule import Finding
from ket.diff.schema import input_findings

QUEUED = "rows already queued"
CALLS = "existing calls"


def effects_findings(old: list[str], new: list[str]) -> list[Finding]:
    """Effects widened (review), narrowed (safe), or only rewritten (safe)."""
    before, after = set(old), set(new)
    # `write:X` may also read X, so trading `read:X` for `write:X` widens by `write:X` alone,
    # and adding `read:X` next to `write:X` widens nothing.
    widened = sorted(effect for effect in after - before if effect not in _reach(before))
    narrowed = sorted(effect for effect in before - after if effect not in _reach(after))
    found: list[Finding] = []
    if widened:
        message = f"effects widened: adds {', '.join(widened)}"
        found.append(Finding(kind="effects_widened", message=message, old=old, new=new))
    if narrowed:
        message = f"effects narrowed: drops {', '.join(narrowed)}"
        found.append(Finding(kind="effects_narrowed", message=message, old=old, new=new))
    if not found:
        message = "effects rewritten without changing what they allow"
        found.append(Finding(kind="effects_restated", message=message, old=old, new=new))
    return found


def schedule_findings(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Finding]:
    """Schedule added, removed, changed or moved to another timezone (review); rewritten (safe)."""
    if old is None and new is not None:
        message = f"schedule added: {_schedule_text(new)}"
        return [Finding(kind="schedule_added", message=message, new=new)]
    if old is None or new is None:
        message = f"schedule removed (was {_schedule_text(old or {})}); no more ticks are enqueued"
        return [Finding(kind="schedule_removed", message=message, old=old)]
    found: list[Finding] = []
    zone_moved = old.get("timezone") != new.get("timezone")
    if zone_moved:
        found.append(_timezone_changed(old.get("timezone"), new.get("timezone")))
    rewritten = _expression(old) != _expression(new)
    # The fingerprint covers the zone, so a zone move alone is reported once, as a zone move.
    if old.get("fingerprint") != new.get("fingerprint") and (rewritten or not zone_moved):
        found.append(_schedule_changed(old, new))
    elif rewritten:
        message = (
            f"schedule rewritten from {_schedule_text(old)} to {_schedule_text(new)}; "
            "same fingerprint, same ticks"
        )
        found.append(Finding(kind="schedule_rewritten", message=message, old=old, new=new))
    return found


def _reach(effects: set[str]) -> set[str]:
    return effects | {"read:" + e.removeprefix("write:") for e in effects if e.startswith("write:")}


def _expression(schedule: Mapping[str, Any]) -> dict[str, Any]:
    return {key: schedule.get(key) for key in ("every", "daily_at", "cron")}


def _schedule_text(schedule: Mapping[str, Any]) -> str:
    parts = [f"{key} {value}" for key, value in _expression(schedule).items() if value is not None]
    zone = f" in {schedule['timezone']}" if schedule.get("timezone") else ""
    return (" ".join(parts) or f"fingerprint {schedule.get('fingerprint')}") + zone


def _schedule_changed(old: dict[str, Any], new: dict[str, Any]) -> Finding:
    before, after = _schedule_text(old), _schedule_text(new)
    if before == after:
        before, after = (
            f"fingerprint {old.get('fingerprint')}",
            f"fingerprint {new.get('fingerprint')}",
        )
    message = f"schedule changed from {before} to {after}"
    return Finding(kind="schedule_changed", message=message, old=old, new=new)


def _timezone_changed(old: object, new: object) -> Finding:
    message = (
        f"schedule timezone changed from {show(old)} to {show(new)}; "
        "wall-clock ticks fire at other instants"
    )
    return Finding(kind="schedule_timezone_changed", message=message, old=old, new=new)


def _cross_company(old: bool, new: bool) -> list[Finding]:
    if new:
        message = "cross_company turned on; it may now enqueue for and read across companies"
        return [Finding(kind="cross_company_enabled", message=message, old=old, new=new)]
    message = "cross_company turned off"
    return [Finding(kind="cross_company_disabled", message=message, old=old, new=new)]


def _queue(old: str, new: str) -> list[Finding]:
    message = f"queue changed from {old} to {new}; rows already queued stay on {old}"
    return [Finding(kind="job_queue_changed", message=message, old=old, new=new)]


def changed(kind: str, name: str) -> FieldRule:
    """A rule that reports `name changed from A to B` as `kind`."""

    def rule(old: Any, new: Any) -> list[Finding]:
        message = f"{name} changed from {show(old)} to {show(new)}"
        return [Finding(kind=kind, message=message, old=old, new=new)]

    return rule


def bound(name: str, lowered: str, *, raised_kind: str | None = None) -> FieldRule:
    """A rule for a numeric limit: `<name>_lowered` (with why it matters) or raised."""

    def rule(old: int, new: int) -> list[Finding]:
        if new < old:
            message = f"{name} lowered from {old} to {new}; {lowered}"
            return [Finding(kind=f"{name}_lowered", message=message, old=old, new=new)]
        message = f"{name} raised from {old} to {new}"
        return [Finding(kind=raised_kind or f"{name}_raised", message=message, old=old, new=new)]

    return rule


def _input(who: str) -> FieldRule:
    def rule(old: dict[str, Any], new: dict[str, Any]) -> list[Finding]:
        return input_findings(old, new, who=who)

    return rule


def _output(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[Finding]:
    """A job's result kept from now on, no longer, or in another shape (the results already
    stored keep theirs: their readers meet both)."""
    if old == new:
        return []
    if old is None:
        return [
            Finding(
                kind="output_added", message="output added: results are kept from now on", new=new
            )
        ]
    if new is None:
        message = "output removed: results are no longer kept, and their readers get none"
        return [Finding(kind="output_removed", message=message, old=old)]
    message = "output changed: results already stored keep their old shape"
    return [Finding(kind="output_changed", message=message, old=old, new=new)]


def _tags(old: list[str], new: list[str]) -> list[Finding]:
    if old == new:
        return []
    message = f"tags changed from {', '.join(old) or 'none'} to {', '.join(new) or 'none'}"
    return [Finding(kind="tags_changed", message=message, old=old, new=new)]


FUNCTION_RULES: Mapping[str, FieldRule] = {
    "handler": changed("handler_changed", "handler"),
    "input": _input(CALLS),
    "effects": effects_findings,
    "cross_company": _cross_company,
}

# A job's input is compared together with its input version (compare._job_inputs).
JOB_RULES: Mapping[str, FieldRule] = {
    **FUNCTION_RULES,
    "queue": _queue,
    "idempotent": changed("idempotent_changed", "idempotent"),
    "max_attempts": bound("max_attempts", "failing runs get fewer retries"),
    "timeout_ms": bound("timeout_ms", "runs that took longer will now time out"),
    "priority": changed("priority_changed", "priority"),
    "backoff": changed("backoff_changed", "backoff"),
    "schedule": schedule_findings,
    "tags": lambda old, new: _tags(old or [], new or []),  # older manifests have none
    "output": _output,
}
