"""The threads plain handlers run in: made when needed, let go when idle, shared by the tenants
of a worker process.

A plain (non-async) handler runs in a thread, and its attempt's clock starts when the thread
starts it (runtime/runner.py), so waiting for a thread costs a job no part of its timeout.
`HandlerThreads` is the worker's pool: at most `limit` threads for every tenant of the process
(`KET_HANDLER_THREADS`), handed out in turn, one tenant's waiting call after another's, so a
tenant that queued many calls does not keep the others' behind them. A worker serving a
thousand tenants of the example app ran a thread per tenant at once after their first ticks
(944 threads, and 220 MB it never gave back); `OnDemandThreads`, the pool under it, is made at
the first plain handler and let go after THREADS_LINGER_SECONDS idle.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ket.catalog import Catalog

log = logging.getLogger("ket.worker")

T = TypeVar("T")

THREADS_LINGER_SECONDS = 30.0  # a pool's threads end after sitting idle this long
# the handler threads of a worker process when KET_HANDLER_THREADS does not say (at least as
# many as one tenant's job slots: a lone tenant's slots always find a thread)
DEFAULT_HANDLER_THREADS = 64
# a call that waited this long for a thread is said (once a minute at most)
WAIT_WARNING_SECONDS = 10.0
SAY_EVERY_SECONDS = 60.0


class OnDemandThreads(Executor):
    """A ThreadPoolExecutor made at the first plain handler, and let go once it sat idle for
    THREADS_LINGER_SECONDS: a tenant whose handlers are all async (or that runs nothing) costs
    no executor's queue, locks and condition at all, and one whose plain handlers ran once (a
    nightly schedule's) keeps no threads. A worker serving a thousand tenants of the example
    app kept a thread per tenant after their first ticks (1,002 threads; 3 with this)."""

    def __init__(self, *, max_workers: int, thread_name_prefix: str) -> None:
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._pool: ThreadPoolExecutor | None = None
        self._busy = 0  # submitted and not done
        self._last = 0.0  # when a call was last submitted or done (monotonic)
        self._lock = threading.Lock()  # done callbacks run in the pool's threads
        self._reaper: asyncio.TimerHandle | None = None

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                max_workers=self._max_workers, thread_name_prefix=self._prefix
            )
        with self._lock:
            self._busy += 1
            self._last = time.monotonic()
        future = self._pool.submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        self._arm()
        return future

    def _done(self, _: Future[Any]) -> None:
        with self._lock:
            self._busy -= 1
            self._last = time.monotonic()

    def _arm(self) -> None:
        """One timer per pool at most, on the loop that submits (none off a loop: the pool then
        lasts until shutdown)."""
        if self._reaper is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._reaper = loop.call_later(THREADS_LINGER_SECONDS, self._reap)

    def _reap(self) -> None:
        self._reaper = None
        pool = self._pool
        if pool is None:
            return
        with self._lock:
            idle = self._busy == 0 and time.monotonic() - self._last >= THREADS_LINGER_SECONDS
        if not idle:
            self._arm()
            return
        self._pool = None
        pool.shutdown(wait=False)  # its threads end; the next plain handler makes a new pool

    @property
    def threads(self) -> int:
        """The pool's threads now (0 without a pool)."""
        pool = self._pool
        return 0 if pool is None else len(pool._threads)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def handler_threads(catalog: Catalog, given: int | None = None) -> int:
    """The handler threads of a worker process: `given` (KET_HANDLER_THREADS), else
    DEFAULT_HANDLER_THREADS, and never fewer than one tenant's job slots."""
    slots = sum(catalog.worker.queues.values())
    return max(given or DEFAULT_HANDLER_THREADS, slots, 1)


@dataclass(eq=False, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Any] = field(default_factory=Future)
    since: float = field(default_factory=time.monotonic)


class HandlerThreads:
    """The plain handlers' threads of one worker process, shared by its tenants: at most
    `limit` run at once, and a free thread takes the next tenant's oldest waiting call, tenant
    after tenant in turn (`for_tenant` gives each tenant its Executor)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit!r}")
        self.limit = limit
        self._pool = OnDemandThreads(max_workers=limit, thread_name_prefix="ket-handler")
        self._lock = threading.Lock()  # calls end in the pool's threads
        self._waiting: dict[str, deque[_Call]] = {}  # in turn: a served tenant goes last
        self._running = 0
        self._said_at = -SAY_EVERY_SECONDS
        self._longest = 0.0  # the longest wait for a thread since it was last said

    def for_tenant(self, tenant: str) -> Executor:
        return _TenantThreads(self, tenant)

    @property
    def threads(self) -> int:
        """The threads now."""
        return self._pool.threads

    def submit(self, tenant: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        call = _Call(fn, args, kwargs)
        with self._lock:
            self._waiting.setdefault(tenant, deque()).append(call)
            ready = self._next()
        for one in ready:
            self._start(one)
        return call.future

    def _next(self) -> list[_Call]:
        """Under the lock: the calls to start now, one per free thread, tenants in turn."""
        ready: list[_Call] = []
        while self._running < self.limit and self._waiting:
            tenant = next(iter(self._waiting))
            calls = self._waiting.pop(tenant)
            call = calls.popleft()
            if calls:
                self._waiting[tenant] = calls  # to the back of the turn
            if call.future.set_running_or_notify_cancel():
                self._running += 1
                ready.append(call)
        return ready

    def _start(self, call: _Call) -> None:
        try:
            self._pool.submit(self._run, call)
        except BaseException as error:  # the pool is shut down: the call fails, not hangs,
            call.future.set_exception(error)  # and so do those its thread would have taken
            for one in self._ended():
                self._start(one)

    def _run(self, call: _Call) -> None:
        self._waited(time.monotonic() - call.since)
        try:
            result = call.fn(*call.args, **call.kwargs)
        except BaseException as error:
            call.future.set_exception(error)
        else:
            call.future.set_result(result)
        finally:
            for one in self._ended():
                self._start(one)

    def _ended(self) -> list[_Call]:
        with self._lock:
            self._running -= 1
            return self._next()

    def _waited(self, seconds: float) -> None:
        if seconds < WAIT_WARNING_SECONDS:
            return
        with self._lock:
            self._longest = max(self._longest, seconds)
            now = time.monotonic()
            if now - self._said_at < SAY_EVERY_SECONDS:
                return
            longest, self._longest, self._said_at = self._longest, 0.0, now
        log.warning(
            "plain handlers waited up to %.0fs for a thread: all %d handler threads of this "
            "worker were busy (raise KET_HANDLER_THREADS if they wait on I/O)",
            longest,
            self.limit,
        )

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if cancel_futures:
            with self._lock:
                waiting = [call for calls in self._waiting.values() for call in calls]
                self._waiting.clear()
            for call in waiting:
                call.future.cancel()
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


class _TenantThreads(Executor):
    """One tenant's way into the process's HandlerThreads. Shutting it down changes nothing:
    the threads are the process's, and a call of a tenant that stops ends as it starts (its
    attempt is aborted by then, see JobRunner)."""

    def __init__(self, threads: HandlerThreads, tenant: str) -> None:
        self._threads = threads
        self._tenant = tenant

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._threads.submit(self._tenant, fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return
