"""Producing jobs from application code with open_client / open_async_client, on SQLite and
PostgreSQL: enqueue, bulk, in the application's own transaction, and refusals."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.errors import JobRejected, KetError
from ket.store import JobQuery
from ket.store.sql import SqlStore
from ket.store.sql.engine import async_url, sync_url


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
    open_client(APP, database_url=database_url).close()  # `default` is the tenant: no error
