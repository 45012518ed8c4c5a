"""How a failure inside a store reaches its caller: as a StoreError, the original as its cause.

The contract promises that every store operation raises StoreError (or a subclass) and nothing
else, so a worker's loops need to know one exception type, and a raw driver error can never
kill them unseen. Each store funnels whatever escapes its own machinery through one translation:
`store_error` here, which the SQL store's `ket.store.sql.failure.database_error` refines with
what it knows about databases (a pool with no free connection, a missing schema).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ket.errors import StoreError

Translate = Callable[[Exception], StoreError]


def store_error(error: Exception) -> StoreError:
    """`error` as the StoreError a caller sees (a StoreError is returned as it is)."""
    if isinstance(error, StoreError):
        return error
    return StoreError(f"the store failed: {describe(error)}")


def describe(error: BaseException) -> str:
    """The error's type and the first line of its message (the rest is for the traceback)."""
    lines = str(error).strip().splitlines()
    name = type(error).__name__
    return f"{name}: {lines[0]}" if lines else name


@contextmanager
def translated(translate: Translate = store_error) -> Iterator[None]:
    """Let StoreError through; raise anything else as `translate(error)`, from the error."""
    try:
        yield
    except StoreError:
        raise
    except Exception as error:
        raise translate(error) from error
