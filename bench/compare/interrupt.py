"""Ctrl-C and SIGTERM held off while the harness cleans up after itself."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM until the block is over, so that an interrupt cannot cancel a
    DROP DATABASE half-way or orphan a worker; the signal arrives right after."""
    held = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
