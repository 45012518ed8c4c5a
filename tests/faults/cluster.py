"""A PostgreSQL cluster of a test's own: `initdb` and `pg_ctl` from the installed PostgreSQL, on a
free port, with the settings the test asks for (a small `max_connections`, say), stopped and
removed afterwards whatever happens.

    with PrivateCluster(max_connections=16) as cluster:
        url = cluster.url("postgres")          # trust authentication, superuser `root`

Run as root (as in the development container), the server runs as the `postgres` OS user
(`initdb` refuses root); the data folder is a temporary one owned by that user. Skips the test
when no PostgreSQL installation is found, or fails it under KET_REQUIRE_POSTGRES=1 (CI).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import pytest

SUPERUSER = "root"  # the role the tests connect as, like the shared server's


def _bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin folder (Debian's layout), else pg_ctl's on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: _version(Path(p).parent))
    if found:
        return Path(found[-1])
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _version(folder: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in folder.name.split(".") if part.isdigit())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def as_postgres(command: list[str]) -> list[str]:
    """`command` as the `postgres` OS user when run as root (PostgreSQL's programs, and
    PgBouncer, refuse to run as root); as it is otherwise."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


class PrivateCluster:
    """A running PostgreSQL cluster in a temporary folder (a context manager)."""

    def __init__(self, *, max_connections: int = 20, **settings: str) -> None:
        self.settings = {"max_connections": str(max_connections), **settings}
        self.port = 0
        self._bin = _bin_dir()
        self._root: Path | None = None
        self._as_postgres = os.geteuid() == 0
        self._options = ""

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def __enter__(self) -> PrivateCluster:
        if self._bin is None or not (self._bin / "initdb").exists():
            why = "no PostgreSQL installation (initdb, pg_ctl) to start a private cluster"
            if os.environ.get("KET_REQUIRE_POSTGRES") == "1":  # CI: never a silent skip
                pytest.fail(f"KET_REQUIRE_POSTGRES=1 but {why}")
            pytest.skip(why)
        self._root = Path(tempfile.mkdtemp(prefix="ket-cluster-"))
        try:
            if self._as_postgres:
                shutil.chown(self._root, "postgres", "postgres")
            data = self._root / "data"
            self._run(
                "initdb", "-D", str(data), "-U", SUPERUSER, "-A", "trust", "--no-sync", "-E", "UTF8"
            )
            self.port = free_port()
            options = " ".join(
                [
                    f"-p {self.port}",
                    "-c listen_addresses=127.0.0.1",
                    f"-c unix_socket_directories={self._root}",
                    "-c fsync=off",
                    "-c synchronous_commit=off",
                    "-c full_page_writes=off",
                    "-c superuser_reserved_connections=0",
                    *(f"-c {key}={value}" for key, value in self.settings.items()),
                ]
            )
            self._options = options
            self.start()
        except BaseException:
            self._remove()
            raise
        return self

    def start(self) -> None:
        """Start the server (again, after `stop`), on the same port; returns once it answers."""
        assert self._root is not None
        data, log = self._root / "data", self._root / "server.log"
        self._run("pg_ctl", "-D", str(data), "-l", str(log), "-o", self._options, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: `immediate` as a crash would (no checkpoint, clients cut off)."""
        assert self._root is not None
        self._run("pg_ctl", "-D", str(self._root / "data"), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        return self._root is not None and (self._root / "data" / "postmaster.pid").exists()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        root, self._root = self._root, None
        if root is None:
            return
        if (root / "data" / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run("pg_ctl", "-D", str(root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        assert self._bin is not None
        command = [str(self._bin / program), *args]
        done = subprocess.run(
            as_postgres(command), capture_output=True, text=True, timeout=60, cwd="/"
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{program} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )
