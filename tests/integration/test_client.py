"""Producing jobs from application code with open_client / open_async_client, on SQLite and
PostgreSQL: enqueue, bulk, in the application's own transaction, and refusals."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pydantic import ValidationError
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from ket import (
    define_deployment,
    define_job,
    define_module,
    hooks,
    open_async_client,
    open_client,
)
from ket.connection.engine import async_url, sync_url
from ket.control.registry import TenantRegistry
from ket.errors import ConnectionRejected, JobRejected, KetError
from ket.runtime.events import Event
from ket.store import JobQuery
from ket.store.sql import SqlStore
from tests.conftest import migrated_postgres_database


async def send(ctx: Any, input: Any) -> None:
    return None


mail = define_module(
    name="mail",
    jobs={"send": define_job(queue="mail", input={"to": "string"}, idempotent=True, handler=send)},
)
APP = define_deployment(name="app", modules=[mail], worker={"queues": {"mail": 2}})


@pytest.fixture(params=["sqlite", "postgresql"])
def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    if request.param == "sqlite":
        url, args = f"sqlite:///{tmp_path / 'app.db'}", {}
    else:
        schema = request.getfixturevalue("postgres_schema")
        url = request.getfixturevalue("postgres_url")
        args = {"options": f"-c search_path={schema}"}
    asyncio.run(_migrate(url, args))
    yield url, args


async def _migrate(url: str, args: dict[str, str]) -> None:
    store = await SqlStore.open(url, migrate=True, connect_args=args)
    await store.close()


def _jobs(url: str, args: dict[str, str]) -> list[tuple[str, dict[str, Any], str | None]]:
    async def read() -> list[tuple[str, dict[str, Any], str | None]]:
        store = await SqlStore.open(url, connect_args=args)
        try:
            records = await store.job_list(JobQuery(limit=1_000))
            return [(r.queue, r.payload, r.unique_key) for r in reversed(records)]
        finally:
            await store.close()

    return asyncio.run(read())


def _client_url(url: str, args: dict[str, str]) -> str:
    # the client takes only a URL: put the test schema into it for PostgreSQL
    if not args:
        return url
    return f"{url}?options={args['options'].replace(' ', '%20').replace('=', '%3D')}"


def test_enqueue_validates_defaults_the_queue_and_coalesces_unique_keys(
    database: tuple[str, dict[str, str]],
) -> None:
    url, args = database
    with open_client(APP, database_url=_client_url(url, args)) as client:
        first = client.enqueue("mail.send", {"to": "a@example.com"}, unique_key="welcome:a")
        again = client.enqueue("mail.send", {"to": "a@example.com"}, unique_key="welcome:a")
        assert (again.id, again.coalesced) == (first.id, True)
        many = client.enqueue_many([("mail.send", {"to": f"{n}@example.com"}) for n in range(100)])
        assert len({i.id for i in many}) == 100
        with pytest.raises(ValidationError):
            client.enqueue("mail.send", {"to": 5})
        with pytest.raises(JobRejected, match=r"unknown job 'mail\.nope'"):
            client.enqueue("mail.nope")
    jobs = _jobs(url, args)
    assert len(jobs) == 101
    assert jobs[0] == ("mail", {"to": "a@example.com"}, "welcome:a")


def test_enqueue_on_the_apps_connection_commits_or_rolls_back_with_it(
    database: tuple[str, dict[str, str]],
) -> None:
    url, args = database
    engine = create_engine(sync_url(url), connect_args=args)
    try:
        with open_client(APP, database_url=_client_url(url, args)) as client:
            with engine.begin() as connection:
                connection.execute(text("SELECT 1"))
                client.enqueue("mail.send", {"to": "kept@example.com"}, connection=connection)
            with pytest.raises(RuntimeError), engine.begin() as connection:
                client.enqueue("mail.send", {"to": "lost@example.com"}, connection=connection)
                raise RuntimeError("the app failed after enqueueing")
    finally:
        engine.dispose()
    assert [payload["to"] for _, payload, _ in _jobs(url, args)] == ["kept@example.com"]


def test_async_client_enqueues_alone_and_on_the_apps_async_connection(
    database: tuple[str, dict[str, str]],
) -> None:
    url, args = database

    async def scenario() -> None:
        client = await open_async_client(APP, database_url=_client_url(url, args))
        engine = create_async_engine(async_url(url), connect_args=args)
        try:
            alone = await client.aenqueue("mail.send", {"to": "one@example.com"})
            assert alone.coalesced is False
            async with engine.begin() as connection:
                await client.aenqueue("mail.send", {"to": "two@example.com"}, connection=connection)
            with pytest.raises(RuntimeError):
                async with engine.begin() as connection:
                    await client.aenqueue_many(
                        [("mail.send", {"to": "three@example.com"})], connection=connection
                    )
                    raise RuntimeError("rolled back")
        finally:
            await engine.dispose()
            await client.aclose()

    asyncio.run(scenario())
    assert [p["to"] for _, p, _ in _jobs(url, args)] == ["one@example.com", "two@example.com"]


@pytest.mark.parametrize("database_url", [None, "sqlite:///elsewhere.db"], ids=["template", "own"])
def test_without_a_registry_only_the_default_tenant_exists_for_a_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str | None
) -> None:
    for name in [k for k in os.environ if k.startswith("KET_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .ket/registry.db: no tenant is registered
    with pytest.raises(KetError) as refused:
        open_client(APP, tenant="acme", database_url=database_url)
    assert refused.value.message == (
        "tenant 'acme' is not registered: no tenant is, so the app runs as the single tenant "
        "'default' (add tenants with `ket tenants add`)"
    )
    assert list(tmp_path.iterdir()) == []  # nothing created for it
    # `default` is the tenant: what stops it is only its database, not migrated yet
    with pytest.raises(KetError, match=r"default\.db' does not exist|elsewhere\.db' does not"):
        open_client(APP, database_url=database_url)
    assert list(tmp_path.iterdir()) == []


class Enqueued:
    """The `enqueued` events the process's hooks get, and whether each job was committed (seen
    from another connection) when its event came."""

    def __init__(self, url: str, args: dict[str, str]) -> None:
        self.seen: list[tuple[str, str | None, int | None, bool]] = []
        self._engine = create_engine(sync_url(url), connect_args=args)
        self._unsubscribe = hooks.subscribe(self._enqueued, ["enqueued"])

    def _enqueued(self, event: Event) -> None:
        with self._engine.connect() as other:
            found = other.execute(
                text("SELECT 1 FROM ket_jobs WHERE id = :id"), {"id": event.job_id}
            )
            self.seen.append((event.tenant, event.name, event.job_id, found.first() is not None))

    def close(self) -> None:
        self._unsubscribe()
        self._engine.dispose()


@pytest.fixture
def enqueued(database: tuple[str, dict[str, str]]) -> Iterator[Enqueued]:
    watcher = Enqueued(*database)
    try:
        yield watcher
    finally:
        watcher.close()


def _committed(url: str, args: dict[str, str]) -> list[int]:
    engine = create_engine(sync_url(url), connect_args=args)
    try:
        with engine.connect() as connection:
            return list(connection.execute(text("SELECT id FROM ket_jobs ORDER BY id")).scalars())
    finally:
        engine.dispose()


def test_a_clients_enqueues_are_reported_to_the_process_hooks_once_committed(
    database: tuple[str, dict[str, str]], enqueued: Enqueued
) -> None:
    url, args = database
    with open_client(APP, database_url=_client_url(url, args)) as client:
        client.enqueue("mail.send", {"to": "a@example.com"})
        client.enqueue_many([("mail.send", {"to": "b@example.com"})] * 2)

    async def produce() -> None:
        async with await open_async_client(APP, database_url=_client_url(url, args)) as client:
            await client.aenqueue("mail.send", {"to": "c@example.com"})
            await client.aenqueue_many([("mail.send", {"to": "d@example.com"})])

    asyncio.run(produce())
    ids = _committed(url, args)
    assert len(ids) == 5
    assert enqueued.seen == [("default", "mail.send", job_id, True) for job_id in ids]


def test_on_the_apps_connection_ket_reports_at_the_insert_what_it_cannot_see_commit(
    database: tuple[str, dict[str, str]], enqueued: Enqueued
) -> None:
    url, args = database
    engine = create_engine(sync_url(url), connect_args=args)
    try:
        with (
            open_client(APP, database_url=_client_url(url, args)) as client,
            pytest.raises(RuntimeError),
            engine.begin() as connection,
        ):
            client.enqueue("mail.send", {"to": "lost@example.com"}, connection=connection)
            raise RuntimeError("the app rolls back after enqueueing")
    finally:
        engine.dispose()
    # a SQLAlchemy Connection tells ket nothing of its commit: the event came at the insert,
    # before the commit, for a job the rollback then took away (docs/operations.md)
    assert _committed(url, args) == []
    assert [(name, committed) for _, name, _, committed in enqueued.seen] == [("mail.send", False)]


def test_on_an_async_session_the_event_waits_for_its_commit_and_a_rollback_sends_none(
    database: tuple[str, dict[str, str]], enqueued: Enqueued
) -> None:
    url, args = database

    async def scenario() -> None:
        client = await open_async_client(APP, database_url=_client_url(url, args))
        engine = create_async_engine(async_url(url), connect_args=args)
        try:
            async with AsyncSession(engine) as session:
                await client.aenqueue("mail.send", {"to": "lost@example.com"}, connection=session)
                await session.rollback()
                async with session.begin():
                    await client.aenqueue_many(
                        [("mail.send", {"to": "kept@example.com"})], connection=session
                    )
                    assert enqueued.seen == []  # not before the commit
        finally:
            await engine.dispose()
            await client.aclose()

    asyncio.run(scenario())
    [kept] = _committed(url, args)
    assert enqueued.seen == [("default", "mail.send", kept, True)]


# -- connection= on another tenant's database ---------------------------------------------------


@dataclass
class Tenants:
    """Tenants `alpha` and `beta` of a registry, each with a PostgreSQL database of its own."""

    alpha: str
    beta: str

    def names(self, url: str) -> list[str]:
        with psycopg.connect(url) as connection:
            rows = connection.execute("SELECT payload->>'to' FROM ket_jobs ORDER BY id")
            return [row[0] for row in rows]


@pytest.fixture
def tenants(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tenants]:
    for name in [k for k in os.environ if k.startswith("KET_")]:
        monkeypatch.delenv(name)
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("KET_REGISTRY_URL", registry)
    with (
        migrated_postgres_database(postgres_url, "ket_alpha") as alpha,
        migrated_postgres_database(postgres_url, "ket_beta") as beta,
    ):
        listing = TenantRegistry(registry)
        try:
            listing.add("alpha", alpha)
            listing.add("beta", beta)
        finally:
            listing.close()
        yield Tenants(alpha=alpha, beta=beta)


def _refusal(alpha: str, beta: str) -> str:
    with psycopg.connect(alpha) as connection:
        port = connection.execute("SHOW port").fetchall()[0][0]  # the server's, not the URL's
    return re.escape(
        f"connection= is on database {beta.rsplit('/', 1)[1]!r} (port {port}) but this client "
        f"writes tenant 'alpha', on database {alpha.rsplit('/', 1)[1]!r} (port {port})"
    )


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy"])
def test_a_connection_on_another_tenants_database_is_refused_naming_both(
    tenants: Tenants, kind: str
) -> None:
    """The job went into beta's table, for beta's workers, with no error."""

    @contextmanager
    def connected(url: str) -> Iterator[Any]:
        if kind == "psycopg":
            with psycopg.connect(url) as connection:
                yield connection
            return
        engine = create_engine(sync_url(url))
        try:
            with engine.begin() as connection:
                yield connection
        finally:
            engine.dispose()

    with open_client(APP, tenant="alpha") as client:
        with connected(tenants.beta) as elsewhere:
            with pytest.raises(ConnectionRejected, match=_refusal(tenants.alpha, tenants.beta)):
                client.enqueue("mail.send", {"to": "beta"}, connection=elsewhere)
            with pytest.raises(ConnectionRejected):  # not remembered as found on alpha's
                client.enqueue_many([("mail.send", {"to": "beta"})], connection=elsewhere)
        with connected(tenants.alpha) as own:
            client.enqueue("mail.send", {"to": "alpha 1"}, connection=own)
            client.enqueue("mail.send", {"to": "alpha 2"}, connection=own)
    assert tenants.names(tenants.beta) == []
    assert tenants.names(tenants.alpha) == ["alpha 1", "alpha 2"]


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy", "session"])
def test_an_async_connection_on_another_tenants_database_is_refused_naming_both(
    tenants: Tenants, kind: str
) -> None:
    @asynccontextmanager
    async def connected(url: str) -> AsyncIterator[Any]:
        if kind == "psycopg":
            async with await psycopg.AsyncConnection.connect(url) as connection:
                yield connection
            return
        engine = create_async_engine(async_url(url))
        try:
            if kind == "session":
                async with AsyncSession(engine) as session, session.begin():
                    yield session
            else:
                async with engine.begin() as connection:
                    yield connection
        finally:
            await engine.dispose()

    async def scenario() -> None:
        client = await open_async_client(APP, tenant="alpha")
        try:
            async with connected(tenants.beta) as elsewhere:
                with pytest.raises(ConnectionRejected, match=_refusal(tenants.alpha, tenants.beta)):
                    await client.aenqueue("mail.send", {"to": "beta"}, connection=elsewhere)
            async with connected(tenants.alpha) as own:
                await client.aenqueue("mail.send", {"to": "alpha 1"}, connection=own)
                await client.aenqueue("mail.send", {"to": "alpha 2"}, connection=own)
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert tenants.names(tenants.beta) == []
    assert tenants.names(tenants.alpha) == ["alpha 1", "alpha 2"]


def test_a_sqlite_connection_on_another_file_is_refused_naming_both(tmp_path: Path) -> None:
    ours, other = tmp_path / "app.db", tmp_path / "other.db"
    for path in (ours, other):
        asyncio.run(_migrate(f"sqlite:///{path}", {}))
    engine = create_engine(f"sqlite:///{other}")
    try:
        with (
            open_client(APP, database_url=f"sqlite:///{ours}") as client,
            engine.begin() as connection,
            pytest.raises(ConnectionRejected) as refused,
        ):
            client.enqueue("mail.send", {"to": "other"}, connection=connection)
    finally:
        engine.dispose()
    assert refused.value.message.startswith(
        f"connection= is on SQLite database {str(other)!r} but this client writes tenant "
        f"'default', on SQLite database {str(ours)!r}"
    )
    assert _jobs(f"sqlite:///{other}", {}) == []
