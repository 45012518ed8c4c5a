"""What the PostgreSQL tests with many databases share: making and dropping databases, and a
sampler that reads something (the connections a process holds) every few milliseconds."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

import psycopg
from psycopg import sql

T = TypeVar("T")

DROPPERS = 8  # connections that drop databases at once


def create_database(admin: str, name: str, template: str | None = None) -> None:
    """CREATE DATABASE `name` on the server of `admin` (a URL), a copy of `template` if given
    (quicker than migrating each: a migrated template is copied as files)."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(statement)


def drop_databases(admin: str, names: Iterable[str]) -> None:
    """DROP DATABASE ... WITH (FORCE) for each of `names` that exists, several at once: each
    drop waits for a checkpoint, and the 200 databases of a test took 77 s one after another
    beside the rest of the suite; drops under way together share their checkpoints."""
    names = list(names)
    if len(names) <= 2:
        _drop(admin, names)
        return
    shares = [names[i::DROPPERS] for i in range(min(DROPPERS, len(names)))]
    with ThreadPoolExecutor(len(shares)) as pool:
        for done in [pool.submit(_drop, admin, share) for share in shares]:
            done.result()


def _drop(admin: str, names: list[str]) -> None:
    with psycopg.connect(admin, autocommit=True) as connection:
        for name in names:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def held_by(admin: str, application_name: str) -> int:
    """How many client backends of the server of `admin` go by `application_name` now."""
    with psycopg.connect(admin, autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
            (application_name,),
        ).fetchone()
    return int(row[0]) if row else 0


class Sampler(Generic[T]):
    """`probe()` every `every` seconds in a thread of its own while the block runs; `samples`
    holds what it returned. A probe the server refuses (it is full, or away for the test's
    fault) is skipped: the next one is taken."""

    def __init__(self, probe: Callable[[], T], every: float = 0.05) -> None:
        self.samples: list[T] = []
        self._probe = probe
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self.samples.append(self._probe())
            except psycopg.OperationalError:
                continue
