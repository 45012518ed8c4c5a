"""A fresh embedded SQLite database for one run of the ket-only SQLite measures, migrated by
`ket migrate`, with the `ket worker` command and reads of its `ket_jobs` table."""

from __future__ import annotations

import secrets
import sqlite3
import subprocess
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from executable import child_env, script
from side import Command

_WORKSPACE = "from ket_app import deployment\n\nbench = deployment({concurrency})\n"


@dataclass(frozen=True, kw_only=True)
class SqliteFile:
    """One run's folder, database file and URL (with `?synchronous=` when one is chosen)."""

    folder: Path
    path: Path
    url: str

    def env(self) -> dict[str, str]:
        registry = f"sqlite:///{self.folder / 'registry.db'}"
        return {"KET_DATABASE_URL": self.url, "KET_REGISTRY_URL": registry}

    def worker(self, concurrency: int | None = None) -> Command:
        """`ket worker` on this file: the default deployment, or one queue at `concurrency`."""
        workspace = self.folder / f"workspace_{concurrency or 'default'}.py"
        workspace.write_text(_WORKSPACE.format(concurrency=concurrency), encoding="utf-8")
        argv = [script("ket"), "worker", "--workspace", str(workspace)]
        return Command(argv=argv, env=self.env())

    def count(self, where: str) -> int:
        with closing(sqlite3.connect(self.path)) as connection:
            row = connection.execute(f"SELECT count(*) FROM ket_jobs WHERE {where}").fetchone()
        return int(row[0])

    def completed_once(self) -> int:
        """Jobs completed at their first attempt (never rescued or retried)."""
        return self.count("state = 'completed' AND attempt = 1")

    def window_s(self) -> float:
        """Seconds from the first claim to the last completion, read from ket_jobs."""
        with closing(sqlite3.connect(self.path)) as connection:
            row = connection.execute(
                "SELECT min(attempted_at), max(finished_at) FROM ket_jobs"
            ).fetchone()
        return (int(row[1]) - int(row[0])) / 1e6  # integer microseconds on SQLite


def fresh_sqlite(parent: Path, synchronous: str | None = None) -> SqliteFile:
    """A new folder and database file under `parent`, installed by `ket migrate`."""
    folder = parent / f"sqlite-{secrets.token_hex(4)}"
    folder.mkdir()
    path = folder / "jobs.db"
    url = f"sqlite:///{path}" + (f"?synchronous={synchronous}" if synchronous else "")
    made = SqliteFile(folder=folder, path=path, url=url)
    migrate = made.worker()
    argv = [migrate.argv[0], "migrate", *migrate.argv[2:]]
    subprocess.run(argv, env=child_env(made.env()), cwd=folder, check=True, capture_output=True)
    return made
