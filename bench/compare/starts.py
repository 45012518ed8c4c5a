"""When each handler started, written by the worker process and read by the harness.

One line per job, `<job id> <time.time()>`, appended to the file named by `KET_CMP_STARTS`; the
environment variable is set only for the latency pass, so a draining worker writes nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TextIO

STARTS_ENV = "KET_CMP_STARTS"


class StartLog:
    """The worker's side: append one line per handler start, flushed at once."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="ascii", buffering=1)

    @classmethod
    def from_environment(cls) -> StartLog | None:
        path = os.environ.get(STARTS_ENV)
        return None if not path else cls(Path(path))

    def record(self, job_id: int, started: float) -> None:
        self._file.write(f"{job_id} {started!r}\n")


class StartReader:
    """The harness's side: the start times read so far, by job id."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self.starts: dict[int, float] = {}

    def read(self) -> dict[int, float]:
        """Read the lines appended since the last call (a partial last line waits)."""
        if not self._path.exists():
            return self.starts
        with self._path.open("rb") as file:
            file.seek(self._offset)
            chunk = file.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.decode("ascii").splitlines():
            job_id, started = line.split()
            self.starts[int(job_id)] = float(started)
        return self.starts
