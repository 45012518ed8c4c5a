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


def terminated(process: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """SIGTERM to `process`, then its whole output once it exits. A process still running after
    `timeout` seconds is killed and the test fails with what it wrote (a worker that does not
    stop writes its threads' stacks there, see `ket.cli.worker`)."""
    process.send_signal(signal.SIGTERM)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate(timeout=10)
        raise AssertionError(
            f"still running {timeout:g} s after SIGTERM; its output:\n{output}"
        ) from None
    return output
