"""The trace an operator's action leaves: a log line under `ket.audit`, and a row in the
tenant's audit log (a store with the AuditLog capability).

The line is written first and always, so an action whose row cannot be written (the tenant's
database not migrated to the audit log yet, or failing just then) is still on record in the
log, at ERROR with the reason. The row is written after the action, with its outcome: a store
offers no transaction spanning a bulk action's batches.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from ket.errors import StoreError
from ket.store.contract import AuditLog, JobStore
from ket.store.types import MAX_AUDIT_TEXT, AuditEntry, AuditRecord

log = logging.getLogger("ket.audit")

_DONE = {"retry": "retried", "cancel": "cancelled"}


async def record(store: JobStore, entry: AuditEntry, *, tenant: str) -> AuditRecord | None:
    """Log `entry` and append it to the store's audit log; the row, or None when it could not
    be written (logged)."""
    entry = replace(entry, subject=_fit(entry.subject), detail=_fit(entry.detail))
    line = describe(entry, tenant=tenant)
    log.info("%s", line, extra={"ket": {"tenant": tenant, "audit": _fields(entry)}})
    if not isinstance(store, AuditLog):
        log.error("not in the audit log (the store keeps none): %s", line)
        return None
    try:
        return await store.audit_append(entry)
    except StoreError as error:
        log.error("not in the audit log (%s): %s", error, line)
        return None


def describe(entry: AuditEntry, *, tenant: str) -> str:
    """The entry as one line: who did what, where, and what came of it."""
    who = f"{entry.subject!r} ({entry.source})"
    if entry.job_id is not None:
        what = f"{entry.action} job {entry.job_id}"
    elif entry.action in ("pause", "resume"):
        what = f"{entry.action} queue {entry.selection.get('queue')}"
    else:
        what = f"{entry.action} by filter {json.dumps(dict(entry.selection), sort_keys=True)}"
        what += f": {entry.changed} of {entry.matched} {_DONE[entry.action]}"
        if entry.skipped:
            what += f", {entry.skipped} left as they were"
    detail = f": {entry.detail}" if entry.detail else ""
    return f"{who} {what} in tenant {tenant}{detail}"


def _fields(entry: AuditEntry) -> dict[str, object]:
    return {
        "subject": entry.subject,
        "source": entry.source,
        "action": entry.action,
        "job_id": entry.job_id,
        "selection": dict(entry.selection),
        "matched": entry.matched,
        "changed": entry.changed,
        "skipped": entry.skipped,
    }


def _fit(text: str) -> str:
    """`text` as the log keeps it: no NUL, at most MAX_AUDIT_TEXT characters (a subject or a
    reason is never a reason to lose the entry)."""
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= MAX_AUDIT_TEXT else text[: MAX_AUDIT_TEXT - 3] + "..."
