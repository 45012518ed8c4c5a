"""Stopping the real processes a test started (workers, servers), whatever state they are in."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable


def stop_processes(processes: Iterable[subprocess.Popen[str]], grace: float = 20.0) -> None:
    """SIGTERM to every process still running (woken first, should a test have stopped it with
    SIGSTOP), then each gets `grace` seconds to exit before SIGKILL."""
    running = list(processes)
    for process in running:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    for process in running:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
