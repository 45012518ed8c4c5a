"""A library's worker CLI as a subprocess: started, watched through /proc, stopped."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from executable import child_env
from interrupt import signals_held
from side import Command

_STOP_GRACE_S = 20.0


class WorkerProcess:
    """One worker process; its output goes to a log file shown when a run fails."""

    def __init__(self, command: Command, folder: Path, log: Path) -> None:
        self._command = command
        self._folder = folder
        self.log = log
        self.spawned = 0.0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the worker is not started")
        return self._process.pid

    def start(self) -> None:
        with self.log.open("wb") as output:
            self.spawned = time.time()  # spawn-to-first-completion starts here
            self._process = subprocess.Popen(
                self._command.argv,
                env=child_env(self._command.env),
                cwd=self._folder,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    def check_alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(
                f"worker exited with status {self._process.returncode}:\n{self.tail()}"
            )

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM (both libraries finish their running jobs and exit), then SIGKILL."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with signals_held():
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> WorkerProcess:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
