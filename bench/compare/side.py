"""What the harness needs of each library: its installer, a producer, its worker CLI, and reads
of its own job table. `ket_side.py` and `peer_side.py` implement it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psycopg
from database import Database


@dataclass(frozen=True, kw_only=True)
class Command:
    """A process to start: its arguments and the environment variables it adds."""

    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True, kw_only=True)
class Window:
    """Timestamps read from the library's own table, as Unix seconds."""

    first_claim: float
    first_finish: float
    last_finish: float


class Producer(Protocol):
    """One client, opened before the timed loop and reused for every call."""

    async def enqueue_one(self) -> int:
        """Enqueue one no-op job with the library's single call; return its id."""
        ...

    async def enqueue_all(self, jobs: int) -> None:
        """Enqueue `jobs` no-op jobs with the library's one bulk call."""
        ...

    async def close(self) -> None: ...


class Side(Protocol):
    """One library under measurement."""

    name: str
    best_label: str

    def install(self, database: Database, folder: Path) -> None:
        """Run the library's own schema installer against `database`."""
        ...

    async def producer(self, database: Database, *, concurrency: int = 1) -> Producer:
        """A producer opened beforehand, for `concurrency` callers at once."""
        ...

    def worker(self, database: Database, folder: Path, *, best: bool) -> Command:
        """The library's worker CLI, with default or best settings."""
        ...

    def queued(self, connection: psycopg.Connection) -> int:
        """How many jobs wait to run."""
        ...

    def finished(self, connection: psycopg.Connection) -> int:
        """How many jobs have completed (the COUNT the drain loop polls)."""
        ...

    def window(self, connection: psycopg.Connection) -> Window: ...

    def verify(self, connection: psycopg.Connection, jobs: int) -> None:
        """Raise unless exactly `jobs` jobs exist and each completed exactly once."""
        ...
