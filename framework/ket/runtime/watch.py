"""An attempt's clock and abort, kept by loop callbacks rather than by tasks that wait.

    watch = AttemptWatch(loop, signal, timeout=30, grace=2, job=job, tenant="acme", task=task)
    watch.start_clock()     # the timeout runs from now: at its end the signal is aborted
    ...                     # the handler runs; while it waits for room for a connection:
    watch.pause(); watch.resume()   # the clock stops, and goes on with what was left
    watch.close()           # over: nothing fires any more

Once the signal is aborted (by the timeout, or from any thread: a heartbeat, the lease guard, a
shutdown), the handler has `grace` seconds to end; then it is cut off: the async handler's task
is cancelled (`cut` tells that cancel from any other), or the waiter of a plain handler's thread
is woken. An async handler that catches that cancel and runs on is named in a warning, like a
plain handler's thread that ignores its abort.

Nearly every attempt ends before any of this fires, so the watch costs one timer and one
listener on the signal, and no task.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ket.context.signal import AbortSignal, resolve
from ket.store.types import ClaimedJob

log = logging.getLogger("ket.worker")

# How long an async handler has to end once cancelled before it is taken to ignore the cancel.
CANCEL_WAIT_SECONDS = 0.1
# How often a handler that ignores its abort is named in a warning.
OVERRUN_WARNING_SECONDS = 30.0


class AttemptWatch:
    """Times one attempt out, and cuts its handler off once an abort's grace is over."""

    __slots__ = (
        "_grace",
        "_grace_seconds",
        "_job",
        "_left",
        "_loop",
        "_paused",
        "_signal",
        "_task",
        "_tenant",
        "_timeout",
        "_timer",
        "_woken",
        "cut",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        signal: AbortSignal,
        *,
        timeout: float,
        grace: float,
        job: ClaimedJob,
        tenant: str,
        task: asyncio.Task[Any] | None = None,
        woken: asyncio.Future[None] | None = None,
    ) -> None:
        self._loop = loop
        self._signal: AbortSignal | None = signal  # None once the attempt is over
        self._timeout = timeout
        self._grace_seconds = grace
        self._job = job
        self._tenant = tenant
        self._task = task  # cancelled at the cut-off: an async handler runs in it
        self._woken = woken  # resolved at the cut-off: a plain handler's waiter awaits it
        self._timer: asyncio.TimerHandle | None = None
        self._grace: asyncio.TimerHandle | None = None
        self._paused = 0  # waits for room under way (they may overlap)
        self._left: float | None = None  # of the timeout, while paused after it started
        self.cut = False  # the grace ran out and the handler was cut off
        signal._on_abort(loop, self._aborted)

    def start_clock(self) -> None:
        """Start the timeout (once; never after the attempt is over). On the loop's thread."""
        signal = self._signal
        if signal is not None and self._timer is None:
            self._timer = self._loop.call_later(self._timeout, signal.abort, "timeout")

    def pause(self) -> None:
        """The handler waits for room for a connection: the timeout stops (store/waiting.py).
        On the loop's thread; each pause is followed by one resume."""
        self._paused += 1
        timer = self._timer
        if self._paused == 1 and timer is not None and self._signal is not None:
            self._left = max(timer.when() - self._loop.time(), 0.0)
            timer.cancel()

    def resume(self) -> None:
        """The wait is over: the timeout goes on with what was left of it."""
        self._paused -= 1
        left, signal = self._left, self._signal
        if self._paused == 0 and left is not None:
            self._left = None
            if signal is not None:
                self._timer = self._loop.call_later(left, signal.abort, "timeout")

    def close(self) -> None:
        """The attempt is over: no timeout, no cut-off any more."""
        self._signal = None
        if self._timer is not None:
            self._timer.cancel()
        if self._grace is not None:
            self._grace.cancel()
        if self.cut and self._task is not None:
            self._task.uncancel()  # the task goes on to report the outcome, uncancelled

    def _aborted(self) -> None:
        if self._signal is not None and self._grace is None:
            self._grace = self._loop.call_later(self._grace_seconds, self._grace_over)

    def _grace_over(self) -> None:
        if self._signal is None:
            return
        self.cut = True
        if self._woken is not None:
            resolve(self._woken)
        if self._task is not None:
            self._task.cancel()
            self._grace = self._loop.call_later(CANCEL_WAIT_SECONDS, self._ignores_cancel)

    def _ignores_cancel(self) -> None:
        """An async handler that caught its CancelledError and runs on: like a plain handler's
        thread, it keeps its slot and lease until it returns, and is named every so often."""
        signal = self._signal
        if signal is None:
            return
        job = self._job
        log.warning(
            "job %s (%s) of tenant %s ignores its abort (%s) and the cancel that followed; "
            "it keeps its slot and lease until it returns",
            job.id,
            job.name,
            self._tenant,
            signal.reason,
        )
        self._grace = self._loop.call_later(OVERRUN_WARNING_SECONDS, self._ignores_cancel)
