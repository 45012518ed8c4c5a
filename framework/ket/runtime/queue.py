"""A queue's claim loop: claim as many jobs as there are free slots, launch them, and wait for a
wake-up (or the adaptive poll interval) when the queue runs dry."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from ket.declare.worker import WorkerConfig
from ket.runtime.events import Event, Hooks
from ket.runtime.lease import Attempts
from ket.runtime.supervisor import Supervisor, backoff
from ket.store.contract import JobStore, PushStore
from ket.store.types import ClaimedJob, JobClaim

Launch = Callable[["QueueSlots", ClaimedJob, float], None]


@dataclass(eq=False)
class QueueSlots:
    """A queue's concurrency: how many of its jobs may run at once in this worker."""

    name: str
    slots: int
    busy: int = 0
    freed: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.busy -= 1
        self.freed.set()


class QueueLoop:
    """Claims and launches one queue's jobs until the worker stops."""

    def __init__(
        self,
        queue: QueueSlots,
        *,
        store: JobStore,
        config: WorkerConfig,
        worker_id: str,
        attempts: Attempts,
        launch: Launch,
        supervisor: Supervisor,
        hooks: Hooks,
        stopping: asyncio.Event,
    ) -> None:
        self.queue = queue
        self.name = f"claim loop of queue {queue.name}"
        self._store = store
        # runtime_checkable isinstance is slow: decide once, not on every idle wait
        self._push: PushStore | None = store if isinstance(store, PushStore) else None
        self._config = config
        self._worker_id = worker_id
        self._attempts = attempts
        self._launch = launch
        self._supervisor = supervisor
        self._hooks = hooks
        self._stopping = stopping

    async def run(self) -> None:
        queue, attempts = self.queue, self._attempts
        poll_min = self._config.poll_min_ms / 1000
        poll_max = self._config.poll_max_ms / 1000
        lease = self._config.lease_ms / 1000
        idle = poll_min
        failures = 0
        busy = False  # the last claim filled every free slot: work is flowing
        while not self._stopping.is_set():
            free = queue.slots - queue.busy
            if free <= 0:
                queue.freed.clear()
                await queue.freed.wait()
                continue
            if not attempts.reachable.is_set():  # fenced off: no claims until it answers
                await _first(attempts.reachable.wait(), self._stopping.wait())
                continue
            # When idle, listen before claiming: a job committed while the claim is in flight
            # must wake the wait that follows, not slip between the claim and the wait. While
            # work flows the claim is almost never short, so skip the extra tasks on that path.
            watch = None if busy else self._watch(idle)
            if watch is not None:
                await asyncio.sleep(0)  # let the watch register its waiter first
            sent = attempts.clock()
            try:
                claimed = await self._store.job_claim(
                    JobClaim(
                        queue=queue.name, limit=free, worker_id=self._worker_id, lease_seconds=lease
                    )
                )
            except Exception as error:
                if watch is not None:
                    watch.cancel()
                failures += 1
                self._failed(error)
                await self._supervisor.sleep(backoff(poll_max, failures))
                continue
            if failures:
                failures = 0
                self._supervisor.repeats.recovered(self._supervisor.where(self.name))
            for job in claimed:
                self._launch(queue, job, sent)
            busy = len(claimed) == free
            if busy:
                if watch is not None:
                    watch.cancel()
                idle = poll_min
                continue  # there may be more: claim again as soon as slots allow
            if claimed:
                idle = poll_min
            woken = await (watch or self._watch(idle))
            idle = poll_min if woken else min(idle * 2, poll_max)

    def _failed(self, error: Exception) -> None:
        """A failed claim: a poll_failed event for hooks, a rate-limited log line."""
        where = self._supervisor.where(self.name)
        self._supervisor.repeats.failure(where, error)
        if self._hooks.wanted("poll_failed"):
            event = Event(
                kind="poll_failed",
                tenant=self._supervisor.tenant or "",
                queue=self.queue.name,
                error=str(error),
            )
            self._hooks.emit(event, logged=False)

    def _watch(self, timeout: float) -> asyncio.Task[bool]:
        return asyncio.ensure_future(self._wait_for_work(timeout))

    async def _wait_for_work(self, timeout: float) -> bool:
        """True when woken for this queue; False on timeout or stop (cancellable anywhere)."""
        if self._push is None:
            await self._supervisor.sleep(timeout)
            return False
        waiting = asyncio.ensure_future(self._push.wait_for_jobs([self.queue.name], timeout))
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait([waiting, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not waiting.done():
                waiting.cancel()
                await asyncio.wait([waiting])  # let it unregister its waiter
        if waiting.cancelled():
            return False
        error = waiting.exception()
        if error is not None:  # wake-ups are hints: poll meanwhile, and say so (rate-limited)
            where = self._supervisor.where(f"wake-ups of queue {self.queue.name}")
            self._supervisor.repeats.failure(where, error, level=logging.WARNING)
            return False
        return bool(waiting.result())


async def _first(*waits: object) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]  # type: ignore[call-overload]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
