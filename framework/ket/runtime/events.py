"""Lifecycle events: logged through `logging` with structured fields, and handed to hooks.

Per-job events go out at DEBUG and are built only when someone listens, so the default log path
costs a level check per job; failures, discards, rescues and fires go out at INFO and above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

log = logging.getLogger("ket.jobs")

Kind = Literal[
    "enqueued",
    "started",
    "completed",
    "failed",
    "discarded",
    "cancelled",
    "handed_back",
    "snoozed",
    "lease_lost",
    "rescued",
    "schedule_fired",
    "poll_failed",
]
LEVELS: dict[Kind, int] = {
    "enqueued": logging.DEBUG,
    "started": logging.DEBUG,
    "completed": logging.DEBUG,
    "failed": logging.INFO,
    "discarded": logging.WARNING,
    "cancelled": logging.INFO,
    "handed_back": logging.INFO,
    "snoozed": logging.INFO,
    "lease_lost": logging.WARNING,
    "rescued": logging.WARNING,
    "schedule_fired": logging.INFO,
    "poll_failed": logging.ERROR,
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One lifecycle event; fields that do not apply are None."""

    kind: Kind
    tenant: str
    job_id: int | None = None
    name: str | None = None
    queue: str | None = None
    attempt: int | None = None
    duration_ms: float | None = None
    error: str | None = None
    detail: str | None = None


Hook = Callable[[Event], None]


class Hooks:
    """Subscribers to lifecycle events; a failing hook is logged and never stops the worker."""

    def __init__(self) -> None:
        self._hooks: list[Hook] = []

    def subscribe(self, hook: Hook) -> Callable[[], None]:
        """Call `hook(event)` for every event; returns a function that unsubscribes it."""
        self._hooks.append(hook)
        return lambda: self._hooks.remove(hook)

    def wanted(self, kind: Kind) -> bool:
        """Whether an event of this kind would reach anyone (skip building it otherwise)."""
        return bool(self._hooks) or log.isEnabledFor(LEVELS[kind])

    def emit(self, event: Event, *, logged: bool = True) -> None:
        """Log `event` (unless `logged` is False: the caller logs it its own way) and hand it
        to every hook."""
        level = LEVELS[event.kind]
        if logged and log.isEnabledFor(level):
            fields = {k: v for k, v in asdict(event).items() if v is not None}
            text = " ".join(f"{k}={v}" for k, v in fields.items() if k != "kind")
            log.log(level, f"{event.kind} {text}", extra={"ket": fields})
        for hook in list(self._hooks):
            try:
                hook(event)
            except Exception:
                log.exception("a lifecycle hook failed on %s", event.kind)


hooks = Hooks()
"""The process's default hooks: what `ket worker` and `ket dev` emit to. Subscribe from the
workspace module, e.g. ``hooks.subscribe(lambda event: metrics.count(event.kind))``."""
