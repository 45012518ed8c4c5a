"""What the PostgreSQL tests with many databases share: making and dropping databases, and a
sampler that reads something (the connections a process holds) every few milliseconds."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

import psycopg
from psycopg import sql

T = TypeVar("T")

DROPPERS = 8  # connections that drop databases at once
RETIRED = "ketgone_"  # the name of a retired database begins so


def create_database(admin: str, name: str, template: str | None = None) -> None:
    """CREATE DATABASE `name` on the server of `admin` (a URL), a copy of `template` if given
    (quicker than migrating each: a migrated template is copied as files)."""
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(statement)


def drop_databases(admin: str, names: Iterable[str]) -> None:
    """Retire each of `names` that exists on the server of `admin`: none can connect to it any
    more, its connections are ended, and it is renamed `ketgone_<random>`; the test session's
    end drops every retired database at once (`drop_retired`, tests/conftest.py). A DROP
    DATABASE waits for a checkpoint, which beside a busy suite took up to 30 s a test (and a
    test's 200 databases 77 s); a rename takes none, and drops together at the end share
    their checkpoints on an idle server."""
    names = list(names)
    if not names:
        return
    with psycopg.connect(admin, autocommit=True) as connection:
        for name in names:
            _retire(connection, name)


def drop_database(admin: str, name: str) -> None:
    """`drop_databases` for one."""
    drop_databases(admin, [name])


def _retire(connection: psycopg.Connection[object], name: str) -> None:
    found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
    if found.fetchone() is None:
        return
    database = sql.Identifier(name)
    connection.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(database))
    retired = sql.Identifier(f"{RETIRED}{uuid.uuid4().hex[:16]}")
    deadline = time.monotonic() + 10.0
    while True:
        connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        try:
            connection.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(database, retired))
            return
        except psycopg.errors.ObjectInUse:  # a terminated backend not gone yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def drop_retired(admin: str) -> int:
    """DROP every database `drop_databases` retired (this session's, and any an interrupted
    session left), several at once; how many."""
    with psycopg.connect(admin, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (RETIRED + "%",)
        ).fetchall()
    names = [row[0] for row in rows]
    if len(names) <= 2:
        _drop(admin, names)
        return len(names)
    shares = [names[i::DROPPERS] for i in range(min(DROPPERS, len(names)))]
    with ThreadPoolExecutor(len(shares)) as pool:
        for done in [pool.submit(_drop, admin, share) for share in shares]:
            done.result()
    return len(names)


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
