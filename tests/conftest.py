"""Shared test fixtures: the PostgreSQL server the integration and conformance tests use, and
the S3 server (moto's) that the storage tests use.

Tests reach PostgreSQL through KET_TEST_POSTGRES_URL (default: the local server). When it cannot
be reached they skip, with one line saying how to enable them, unless KET_REQUIRE_POSTGRES=1
(as in CI), where they fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import settings
from psycopg import sql

from tests.databases import drop_databases, drop_retired
from tests.s3_server import CREDENTIALS, S3Server

# No time limit on a property test's example (hypothesis's default is 200 ms): the suite runs
# three test processes beside real workers on two cores, where an example that calls an ASGI app
# and a store now and then takes longer, and timing goals live in bench/, not in tests.
settings.register_profile("ket", deadline=None)
settings.load_profile("ket")

POSTGRES_URL = os.environ.get("KET_TEST_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
REQUIRED = os.environ.get("KET_REQUIRE_POSTGRES") == "1"


def _reachable() -> str | None:
    """None when the server answers, else why not."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3, autocommit=True) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        return str(error).strip().splitlines()[0]
    return None


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The databases the tests retired (tests/databases.py), dropped at once at the very end:
    by the one process that runs the session (xdist's controller, after every worker ended)."""
    if hasattr(session.config, "workerinput") or _reachable() is not None:
        return
    drop_retired(POSTGRES_URL)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The server URL, after proving it answers (fail under KET_REQUIRE_POSTGRES=1, else skip)."""
    problem = _reachable()
    if problem is not None:
        message = (
            f"PostgreSQL is not reachable at {POSTGRES_URL} ({problem}); start it or set "
            "KET_TEST_POSTGRES_URL to run these tests"
        )
        if REQUIRED:
            pytest.fail(f"KET_REQUIRE_POSTGRES=1 but {message}")
        pytest.skip(message)
    return POSTGRES_URL


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A fresh, empty schema for one test, dropped afterwards."""
    name = f"ket_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(params=["sqlite", "postgresql"])
def tenant_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty tenant database on each store (a file; a database of its own on the
    server, dropped afterwards): its URL."""
    from ket.store.sql import SqlStore

    async def migrate(url: str) -> None:
        store = await SqlStore.open(url, migrate=True)
        await store.close()

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tenant.db'}"
        asyncio.run(migrate(url))
        yield url
        return
    server: str = request.getfixturevalue("postgres_url")
    with migrated_postgres_database(server, "ket_tenant") as url:
        yield url


@contextlib.contextmanager
def migrated_postgres_database(
    server: str, prefix: str, *, before_migrate: Callable[[str], None] | None = None
) -> Iterator[str]:
    """A database of its own on `server` (named `prefix_<random>`), with ket's tables (after
    `before_migrate(url)`, if given), dropped afterwards: its URL."""
    from ket.store.sql import SqlStore

    async def migrate(url: str) -> None:
        store = await SqlStore.open(url, migrate=True)
        await store.close()

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = f"{server.rsplit('/', 1)[0]}/{name}"
        if before_migrate is not None:
            before_migrate(url)
        asyncio.run(migrate(url))
        yield url
    finally:
        drop_databases(server, [name])


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server, a real HTTP S3 API on a free port, for the whole session. A test that
    needs it fails (never skips) when it cannot start, moto missing included."""
    try:
        server = S3Server.start(tmp_path_factory.mktemp("s3"))
    except RuntimeError as problem:
        pytest.fail(str(problem))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the S3 server, with test credentials in the environment (and no AWS
    setting of the machine's that could send a client elsewhere)."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    return s3_server.new_bucket()
