"""What running attempts report with `ctx.progress`, until a heartbeat writes it.

A report costs no write of its own: it waits here, the latest per job, and the next heartbeat
of the job's lease carries it (within a third of the lease: `ket jobs show`, the dashboard), in
the same statement batch, under the attempt's fence. Listeners hear it at once as a `progress`
event.

    board = ProgressBoard(hooks, tenant="acme")
    board.report(job, 0.4, "charging cards")    # ctx.progress, from any thread
    board.take(job.id)                          # the heartbeat: '{"fraction":0.4,"note":"..."}'
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import TYPE_CHECKING

from ket.limits import MAX_PROGRESS_NOTE
from ket.runtime.events import Event, Hooks

if TYPE_CHECKING:
    from ket.store.types import ClaimedJob, JobId


class ProgressBoard:
    """The latest unwritten report of each running attempt of one tenant."""

    def __init__(self, hooks: Hooks | None, *, tenant: str) -> None:
        self._hooks = hooks
        self._tenant = tenant
        self._pending: dict[JobId, str] = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # where events are emitted

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the worker runs on (a plain handler reports from a thread)."""
        self.loop = loop

    def report(self, job: ClaimedJob, fraction: float, note: str | None = None) -> None:
        """Record `fraction` (0 to 1) done and an optional `note` for `job`; ValueError or
        TypeError names a bad value."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"ctx.progress: fraction must be a number, got {fraction!r}")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError(f"ctx.progress: fraction must be from 0 to 1, got {fraction!r}")
        if note is not None and not isinstance(note, str):
            raise TypeError(f"ctx.progress: note must be a string, got {note!r}")
        if note is not None and len(note) > MAX_PROGRESS_NOTE:
            note = note[: MAX_PROGRESS_NOTE - 1] + "\u2026"
        value = {"fraction": float(fraction), "note": note}
        self._pending[job.id] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        hooks = self._hooks
        if hooks is not None and hooks.wanted("progress"):
            event = Event(
                kind="progress",
                tenant=self._tenant,
                job_id=job.id,
                name=job.name,
                queue=job.queue,
                attempt=job.attempt,
                detail=note,
                progress=float(fraction),
            )
            self._emit(hooks, event)

    def take(self, job_id: JobId) -> str | None:
        """The report of `job_id` not written yet (JSON text), forgotten here."""
        return self._pending.pop(job_id, None)

    def forget(self, job_id: JobId) -> None:
        """The attempt is over: a report it left unwritten goes."""
        self._pending.pop(job_id, None)

    def _emit(self, hooks: Hooks, event: Event) -> None:
        """On the worker's loop, as its other events are: a plain handler reports from its
        thread (with no loop attached, in the caller's thread)."""
        loop = self.loop
        try:
            on_loop = loop is None or asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            hooks.emit(event)
        else:
            loop.call_soon_threadsafe(hooks.emit, event)  # type: ignore[union-attr]
