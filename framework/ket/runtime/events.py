"""Lifecycle events: logged through `logging` with structured fields, and handed to hooks.

Per-job events go out at DEBUG and are built only when someone listens, so the default log path
costs a level check per job; failures, discards, rescues and fires go out at INFO and above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal, NamedTuple

from ket import process

if TYPE_CHECKING:  # only for the annotations: `from ket import hooks` loads no store
    from ket.store.types import Inserted, NewJob

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
    "progress",
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
    "progress": logging.DEBUG,
}


class Event(NamedTuple):
    """One lifecycle event; fields that do not apply are None.

    `waited_ms` (on `started`, and again on the attempt's outcome): from when the job was due
    (its `run_at`: the enqueue, for a job enqueued to run now) to its start, by the worker's
    clock. `skipped` (on `schedule_fired`): the ticks passed over before this one. `retry_at`
    (on `failed`, `snoozed` and `handed_back`): when the job is due again, timezone-aware UTC,
    by the worker's clock as the outcome is recorded (the row's `run_at` is the database's).
    `progress` (on `progress`): the fraction a handler reported done with ctx.progress, its note
    in `detail`.

    A named tuple, immutable as a frozen dataclass is, because two are built per job whenever
    anyone listens and a frozen dataclass of these fields takes three times as long to build
    (3.3 us against 1.0 us on the development machine). Build it with keywords."""

    kind: Kind
    tenant: str
    job_id: int | None = None
    name: str | None = None
    queue: str | None = None
    attempt: int | None = None
    duration_ms: float | None = None
    waited_ms: float | None = None
    skipped: int | None = None
    error: str | None = None
    detail: str | None = None
    retry_at: datetime | None = None
    progress: float | None = None


def attempt_event(
    kind: Kind,
    tenant: str,
    job_id: int,
    name: str,
    queue: str,
    attempt: int,
    duration_ms: float,
    waited_ms: float | None,
    error: str | None,
    retry_at: datetime | None = None,
) -> Event:
    """The event of an attempt's outcome. It is built once per job whenever anyone listens, so
    it is built from a tuple in Event's field order: from keywords it costs twice as much."""
    # in Event's field order; skipped and detail (the Nones) never apply to an attempt's outcome
    # fmt: off
    fields = (kind, tenant, job_id, name, queue, attempt, duration_ms, waited_ms,
              None, error, None, retry_at, None)
    # fmt: on
    return tuple.__new__(Event, fields)


Hook = Callable[[Event], None]


class Hooks:
    """Subscribers to lifecycle events; a failing hook is logged and never stops the worker.

    A hook may take only some kinds of event: the others are then not even built for it (a
    metrics hook that ignores `enqueued` costs a handler's enqueue nothing)."""

    def __init__(self) -> None:
        self._hooks: list[tuple[Hook, frozenset[Kind] | None]] = []
        self._by_kind: dict[str, tuple[Hook, ...]] = {}  # the hooks of each kind some hook takes

    def subscribe(self, hook: Hook, kinds: Collection[Kind] | None = None) -> Callable[[], None]:
        """Call `hook(event)` for every event (or those of `kinds`); returns a function that
        unsubscribes it."""
        entry = (hook, None if kinds is None else frozenset(kinds))
        self._hooks.append(entry)
        self._wanted()

        def unsubscribe() -> None:
            self._hooks.remove(entry)
            self._wanted()

        return unsubscribe

    def wanted(self, kind: Kind) -> bool:
        """Whether an event of this kind would reach anyone (skip building it otherwise)."""
        return kind in self._by_kind or log.isEnabledFor(LEVELS[kind])

    def _wanted(self) -> None:
        by_kind: dict[str, tuple[Hook, ...]] = {}
        for hook, only in self._hooks:
            for kind in LEVELS if only is None else only:
                by_kind[kind] = (*by_kind.get(kind, ()), hook)
        self._by_kind = by_kind  # replaced whole: an emit in progress keeps the one it read

    def emit(self, event: Event, *, logged: bool = True) -> None:
        """Log `event` (unless `logged` is False: the caller logs it its own way) and hand it
        to every hook."""
        kind = event.kind
        level = LEVELS[kind]
        if logged and log.isEnabledFor(level):
            fields = {k: _logged(v) for k, v in event._asdict().items() if v is not None}
            text = " ".join(f"{k}={v}" for k, v in fields.items() if k != "kind")
            log.log(level, f"{kind} {text}", extra={"ket": fields})
        for hook in self._by_kind.get(kind, ()):
            try:
                hook(event)
            except Exception:
                log.exception("a lifecycle hook failed on %s", kind)


def report_enqueued(
    hooks: Hooks, tenant: str, jobs: Sequence[NewJob], inserted: Sequence[Inserted]
) -> None:
    """An `enqueued` event for each of `jobs`, once their insert is durable, if anyone
    listens; `detail` says `coalesced` for a job that joined an active one."""
    if not hooks.wanted("enqueued"):
        return
    for job, result in zip(jobs, inserted, strict=True):
        event = Event(
            kind="enqueued",
            tenant=tenant,
            job_id=result.id,
            name=job.name,
            queue=job.queue,
            detail="coalesced" if result.coalesced else None,
        )
        hooks.emit(event)


def _logged(value: object) -> object:
    # an instant as ISO 8601 text, in the text format and the JSON one alike
    return value.isoformat() if isinstance(value, datetime) else value


def process_hooks() -> Hooks:
    """The process's hooks (`from ket import hooks`): what `ket worker`, `ket dev`, `ket serve`
    and the clients emit to (a part of the process: ket.process). Subscribe from the workspace
    module, e.g. ``hooks.subscribe(lambda event: metrics.count(event.kind))``."""
    return process.current().part(Hooks)


if TYPE_CHECKING:
    hooks: Hooks  # `from ket.runtime.events import hooks`: the process's, as process_hooks()
else:

    def __getattr__(name: str) -> Hooks:
        if name == "hooks":
            return process_hooks()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
