"""The one adapter between plain handlers and the async core: blocking calls on the loop.

A plain (`def`) handler runs in a worker thread and calls the same context the async core
offers, without `await`: every coroutine method is run on the worker's event loop and waited
for. Nothing is implemented twice.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import Any


class Blocking:
    """A proxy of `target` whose coroutine methods block until done on `loop`."""

    def __init__(self, target: Any, loop: asyncio.AbstractEventLoop) -> None:
        # mangled names: the wrapped part is not reachable as `ctx.db._target`
        object.__setattr__(self, "_Blocking__target", target)
        object.__setattr__(self, "_Blocking__loop", loop)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.__target, name)
        if inspect.iscoroutinefunction(value):
            return functools.partial(_call, self.__loop, value)
        if getattr(value, "__ket_api__", False):  # a sub-API such as ctx.jobs
            return Blocking(value, self.__loop)
        return value

    def __dir__(self) -> list[str]:
        return dir(self.__target)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the handler context is read-only (tried to set {name!r})")

    def __repr__(self) -> str:
        return f"Blocking({self.__target!r})"


def _call(loop: asyncio.AbstractEventLoop, method: Any, *args: Any, **kwargs: Any) -> Any:
    if _on_loop_thread(loop):
        raise RuntimeError(
            "a plain handler's context was called on the event loop's own thread; "
            "plain handlers run in worker threads, async handlers must await the context"
        )
    return asyncio.run_coroutine_threadsafe(method(*args, **kwargs), loop).result()


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    thread = getattr(loop, "_thread_id", None)
    return thread == threading.get_ident()
