"""Fencing a job's context: once its signal is aborted, every effect call raises Aborted.

An attempt that timed out, was cancelled or lost its lease is over, even if its handler runs on
(a plain handler's thread cannot be stopped). Its context must then refuse to write rows, enqueue,
store blobs or send, so nothing it does lands after its outcome was decided or beside its retry.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from ket.context.signal import AbortSignal

T = TypeVar("T")


class Fenced:
    """A proxy of a context part (`ctx.db`, `ctx.jobs`, ...) whose calls check `signal` first."""

    def __init__(self, target: Any, signal: AbortSignal) -> None:
        # mangled names: the fenced part is not reachable as `ctx.db._target`
        object.__setattr__(self, "_Fenced__target", target)
        object.__setattr__(self, "_Fenced__signal", signal)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.__target, name)
        if inspect.iscoroutinefunction(value):
            return _fenced_coroutine(value, self.__signal)
        if getattr(value, "__ket_api__", False):
            return Fenced(value, self.__signal)
        return value

    def __dir__(self) -> list[str]:
        return dir(self.__target)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the handler context is read-only (tried to set {name!r})")

    def __repr__(self) -> str:
        return repr(self.__target)

    # the Blocking adapter asks whether a part is a sub-API to wrap
    __ket_api__ = True


def fence(target: T, signal: AbortSignal) -> T:
    """`target` behind a fence on `signal` (typed as `target` for the context's fields)."""
    return Fenced(target, signal)  # type: ignore[return-value]


def fence_call(call: Callable[..., Any], signal: AbortSignal) -> Any:
    """An async callable (such as `ctx.tx`) that raises Aborted once `signal` is aborted."""
    return _fenced_coroutine(call, signal)


def _fenced_coroutine(method: Callable[..., Any], signal: AbortSignal) -> Callable[..., Any]:
    @functools.wraps(method)
    async def fenced(*args: Any, **kwargs: Any) -> Any:
        signal.throw_if_aborted()
        return await method(*args, **kwargs)

    return fenced
