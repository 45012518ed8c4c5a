"""The deployment's queues in one tenant as an operator sees them (`ket queues`, the
dashboard's Queues page, `ket serve`'s operator API), and an operator's pause and resume of one,
each written to the audit log with who did it and through what."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ket.catalog import Catalog
from ket.errors import KetError
from ket.operate.action import Actor
from ket.operate.audit import record
from ket.store.contract import JobStore, QueryableStore, QueueControl
from ket.store.types import AuditAction, AuditEntry, QueuePause


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueRow:
    """One queue of the deployment: its pause (None: it runs), its jobs by state, and how long
    its oldest due job has waited (None: none is due)."""

    queue: str
    pause: QueuePause | None
    available: int
    scheduled: int
    executing: int
    retryable: int
    oldest_available_age: float | None

    def to_json(self) -> dict[str, Any]:
        """The row as `ket queues list --format json` and `GET /operator/queues` show it."""
        pause = self.pause
        return {
            "queue": self.queue,
            "paused": pause is not None,
            "paused_at": None if pause is None else pause.paused_at.isoformat(),
            "paused_by": None if pause is None else pause.paused_by,
            "available": self.available,
            "scheduled": self.scheduled,
            "executing": self.executing,
            "retryable": self.retryable,
            "oldest_available_seconds": self.oldest_available_age,
        }


def declared_queues(catalog: Catalog) -> list[str]:
    """The deployment's queues (its worker's: every job's queue is one of them), by name."""
    return sorted(catalog.worker.queues)


def declared_queue(catalog: Catalog, queue: str) -> str:
    """`queue` if the deployment declares it; else KetError naming the declared ones (a typo
    must not pause a queue no job uses)."""
    known = declared_queues(catalog)
    if queue not in known:
        close = difflib.get_close_matches(queue, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise KetError(
            f"no queue {queue!r} in deployment {catalog.deployment!r} "
            f"(queues: {', '.join(known) or 'none'}){hint}"
        )
    return queue


async def resumable_queue(store: JobStore, catalog: Catalog, queue: str) -> str:
    """`queue` if the deployment declares it or it is paused in the tenant (a pause that the
    deployment outlived must still be liftable); else KetError as `declared_queue` says it."""
    if queue in await queue_pauses(store):
        return queue
    return declared_queue(catalog, queue)


async def queue_pauses(store: JobStore) -> Mapping[str, QueuePause]:
    """The tenant's paused queues, by name; KetError for a store that cannot pause queues."""
    return await _control(store).queue_pauses()


async def queue_rows(store: JobStore, catalog: Catalog) -> list[QueueRow]:
    """One row per declared queue, by name (and any paused queue the deployment no longer
    declares, so that its pause can be seen and lifted)."""
    if not isinstance(store, QueryableStore):
        raise KetError("this store cannot list queues")
    pauses = await queue_pauses(store)
    stats = await store.job_stats()
    names = sorted(set(declared_queues(catalog)) | set(pauses))
    rows: list[QueueRow] = []
    for name in names:
        ages = stats.queue_ages.get(name)
        rows.append(
            QueueRow(
                queue=name,
                pause=pauses.get(name),
                available=stats.counts.get(("available", name), 0),
                scheduled=stats.counts.get(("scheduled", name), 0),
                executing=stats.counts.get(("executing", name), 0),
                retryable=stats.counts.get(("retryable", name), 0),
                oldest_available_age=None if ages is None else ages.oldest_available_age,
            )
        )
    return rows


async def pause_queue(store: JobStore, queue: str, actor: Actor, *, tenant: str) -> bool:
    """Pause `queue` in the tenant (no worker claims its jobs until it is resumed; running
    attempts finish); True when it was not paused. Recorded as `actor`'s."""
    changed = await _control(store).queue_pause(queue, paused_by=actor.subject)
    await _trace(store, "pause", "paused", queue, changed, actor, tenant)
    return changed


async def resume_queue(store: JobStore, queue: str, actor: Actor, *, tenant: str) -> bool:
    """Resume `queue` in the tenant and wake its workers; True when it was paused. Recorded as
    `actor`'s."""
    changed = await _control(store).queue_resume(queue)
    await _trace(store, "resume", "resumed", queue, changed, actor, tenant)
    return changed


def _control(store: JobStore) -> QueueControl:
    if not isinstance(store, QueueControl):
        raise KetError(f"store {type(store).__name__} cannot pause queues")
    return store


async def _trace(
    store: JobStore,
    action: AuditAction,
    word: str,
    queue: str,
    changed: bool,
    actor: Actor,
    tenant: str,
) -> None:
    entry = AuditEntry(
        subject=actor.subject,
        source=actor.source,
        action=action,
        selection={"queue": queue},
        matched=1,
        changed=int(changed),
        skipped=int(not changed),
        detail=f"queue {queue} {word}" if changed else f"queue {queue} was already {word}",
    )
    await record(store, entry, tenant=tenant)
