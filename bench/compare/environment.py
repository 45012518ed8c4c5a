"""Where the figures were taken: versions, commit, cores, date."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version

from database import server_version
from executable import HERE


@dataclass(frozen=True, kw_only=True)
class Environment:
    taken_at: str
    ket_commit: str
    pgqueuer: str
    postgresql: str
    cores: int

    def line(self) -> str:
        return (
            f"ket {self.ket_commit}, PgQueuer {self.pgqueuer}, PostgreSQL {self.postgresql}, "
            f"{self.cores} cores, {self.taken_at}"
        )


def _commit() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True)
        return done.stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "../../framework")
    return f"{commit}{' + uncommitted changes' if dirty else ''}"


def describe() -> Environment:
    return Environment(
        taken_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        ket_commit=_commit(),
        pgqueuer=version("pgqueuer"),
        postgresql=server_version(),
        cores=os.cpu_count() or 0,
    )
