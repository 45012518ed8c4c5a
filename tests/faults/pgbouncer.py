"""A PgBouncer of a test's own: Debian's `pgbouncer` on a free port, with its own ini in a
temporary folder, in front of a PostgreSQL server, stopped and removed afterwards whatever
happens.

    with PgBouncer("127.0.0.1", 5432, pool_mode="transaction") as bouncer:
        url = bouncer.url("erp_acme")         # trust authentication, user `root`

Every database name is passed through to the server (`* = host=... port=...`). As root (the
development container, CI) it runs as the `postgres` OS user, as PrivateCluster's server does:
PgBouncer refuses to run as root. Without the program, the test fails under
KET_REQUIRE_POSTGRES=1 (CI installs it: .ci/run) and skips otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path
from types import TracebackType

import pytest

from tests.conftest import REQUIRED
from tests.faults.cluster import SUPERUSER, as_postgres, free_port

PROGRAM = "/usr/sbin/pgbouncer"
POOL_MODES = ("session", "transaction", "statement")


def version() -> str:
    """The installed PgBouncer's version line (`PgBouncer 1.18.0`)."""
    done = subprocess.run([PROGRAM, "--version"], capture_output=True, text=True, timeout=10)
    return done.stdout.splitlines()[0].strip()


class PgBouncer:
    """A running PgBouncer in a temporary folder (a context manager)."""

    def __init__(self, host: str, port: int, *, pool_mode: str, pool_size: int = 20) -> None:
        if pool_mode not in POOL_MODES:
            raise ValueError(f"pool_mode must be one of {POOL_MODES}, got {pool_mode!r}")
        self.server = (host, port)
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = 0
        self._root: Path | None = None

    def url(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    @property
    def log(self) -> str:
        """What PgBouncer logged so far (its errors name what a client did wrong)."""
        if self._root is None or not (self._root / "pgbouncer.log").exists():
            return ""
        return (self._root / "pgbouncer.log").read_text(errors="replace")

    def __enter__(self) -> PgBouncer:
        if not Path(PROGRAM).exists():
            message = f"{PROGRAM} is missing: apt-get install pgbouncer (.ci/run does)"
            if REQUIRED:
                pytest.fail(f"KET_REQUIRE_POSTGRES=1 but {message}")
            pytest.skip(message)
        self._root = Path(tempfile.mkdtemp(prefix="ket-pgbouncer-"))
        try:
            self.port = free_port()
            self._configure(self._root)
            done = subprocess.run(
                as_postgres([PROGRAM, "-d", str(self._root / "pgbouncer.ini")]),
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
            )
            if done.returncode != 0:
                raise RuntimeError(f"pgbouncer failed ({done.returncode}): {done.stderr}{self.log}")
            self._wait_listening()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._remove()

    def _configure(self, root: Path) -> None:
        host, port = self.server
        (root / "userlist.txt").write_text(f'"{SUPERUSER}" ""\n')
        (root / "pgbouncer.ini").write_text(
            textwrap.dedent(
                f"""\
                [databases]
                * = host={host} port={port}

                [pgbouncer]
                listen_addr = 127.0.0.1
                listen_port = {self.port}
                unix_socket_dir =
                auth_type = trust
                auth_file = {root / "userlist.txt"}
                pool_mode = {self.pool_mode}
                default_pool_size = {self.pool_size}
                max_client_conn = 500
                logfile = {root / "pgbouncer.log"}
                pidfile = {root / "pgbouncer.pid"}
                admin_users = {SUPERUSER}
                """
            )
        )
        if os.geteuid() == 0:
            for path in (root, *root.iterdir()):
                shutil.chown(path, "postgres", "postgres")

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 15
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not listen on {self.port}: {self.log}")
            time.sleep(0.05)

    def _pid(self) -> int | None:
        assert self._root is not None
        try:
            return int((self._root / "pgbouncer.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _remove(self) -> None:
        if self._root is None:
            return
        pid = self._pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # shut down at once, closing every connection
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self._root, ignore_errors=True)
        self._root = None


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie left to an init that does not reap is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status
