"""Enqueue on the application's own connection: the job exists iff its transaction commits. A
SQLAlchemy connection on SQLite and PostgreSQL, for one job and for a batch (one statement of
arrays on PostgreSQL, numbered rows on SQLite); a psycopg 3 connection, sync and async, in a
transaction or in autocommit mode (the jobs then commit at once, all or none); an AsyncSession;
whose commit (never a savepoint's, never a rollback) sends the control channel's hint; and a
refusal, naming it, of any other kind. Django's connection: test_django.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from ket.connection.address import libpq_dsn, parse_url
from ket.connection.engine import async_url, sync_url
from ket.errors import ConnectionRejected, StoreError
from ket.store import JobQuery, NewJob
from ket.store.sql import SqlStore
from ket.store.sql.insert import CHANNEL, NUMBERED_FROM
from ket.wakeup.control_channel import ControlChannel, close_senders
from tests.databases import drop_database


@pytest.fixture(params=["sqlite", "postgresql"])
def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, dict[str, str]]]:
    """(url, connect_args) of an empty, migrated database of each dialect."""
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


async def _names(url: str, args: dict[str, str]) -> list[str]:
    store = await SqlStore.open(url, connect_args=args)
    try:
        return sorted(record.name for record in await store.job_list(JobQuery(limit=1_000)))
    finally:
        await store.close()


def _app_engine(url: str, args: dict[str, str]) -> Engine:
    return create_engine(sync_url(url), connect_args=args)


@pytest.mark.parametrize("count", [1, NUMBERED_FROM + 6])
def test_jobs_enqueued_in_a_committed_app_transaction_exist(
    database: tuple[str, dict[str, str]], count: int
) -> None:
    url, args = database
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    engine = _app_engine(url, args)
    try:
        with engine.begin() as connection:
            connection.execute(text("SELECT 1"))  # the app's own work would go here
            inserted = store.job_insert_sync(
                connection, [NewJob(name=f"app.job{i:03}") for i in range(count)]
            )
        assert len({i.id for i in inserted}) == count
        assert asyncio.run(_names(url, args)) == [f"app.job{i:03}" for i in range(count)]
    finally:
        engine.dispose()
        asyncio.run(store.close())


@pytest.mark.parametrize("count", [1, NUMBERED_FROM + 6])
def test_jobs_enqueued_in_a_rolled_back_app_transaction_do_not_exist(
    database: tuple[str, dict[str, str]], count: int
) -> None:
    url, args = database
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    engine = _app_engine(url, args)
    try:
        with pytest.raises(RuntimeError, match="the app failed"), engine.begin() as connection:
            store.job_insert_sync(connection, [NewJob(name="app.job") for _ in range(count)])
            raise RuntimeError("the app failed")
        assert asyncio.run(_names(url, args)) == []
    finally:
        engine.dispose()
        asyncio.run(store.close())


# -- the other connections an application holds (ket.store.sql.app_connection) -----------------

UNIQUE = [NewJob(name="app.keyed", unique_key="k"), NewJob(name="app.keyed", unique_key="k")]


@pytest.fixture
def postgres(postgres_url: str, postgres_schema: str) -> Iterator[tuple[str, dict[str, str]]]:
    """(url, connect_args) of an empty, migrated schema on PostgreSQL."""
    args = {"options": f"-c search_path={postgres_schema}"}
    asyncio.run(_migrate(postgres_url, args))
    yield postgres_url, args


@pytest.mark.parametrize("count", [1, 5])
def test_a_psycopg_connection_commits_or_rolls_back_the_jobs_with_its_transaction(
    postgres: tuple[str, dict[str, str]], count: int
) -> None:
    url, args = postgres
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    try:
        with psycopg.connect(url, options=args["options"]) as connection:
            store.job_insert_sync(connection, [NewJob(name="app.kept") for _ in range(count)])
            assert asyncio.run(_names(url, args)) == []  # not before the commit
            connection.commit()
            store.job_insert_sync(connection, [NewJob(name="app.lost") for _ in range(count)])
            connection.rollback()
            with connection.transaction():
                inserted = store.job_insert_sync(connection, UNIQUE)
        assert (inserted[1].id, inserted[1].coalesced) == (inserted[0].id, True)
        assert asyncio.run(_names(url, args)) == ["app.kept"] * count + ["app.keyed"]
    finally:
        asyncio.run(store.close())


def test_a_psycopg_connection_in_autocommit_mode_commits_the_jobs_at_once_all_or_none(
    postgres: tuple[str, dict[str, str]],
) -> None:
    url, args = postgres
    store = asyncio.run(SqlStore.open(url, connect_args=args))
    try:
        with psycopg.connect(url, autocommit=True, options=args["options"]) as connection:
            inserted = store.job_insert_sync(connection, UNIQUE)
            assert asyncio.run(_names(url, args)) == ["app.keyed"]
            assert inserted[1].coalesced
            # a job the database refuses takes the others of its batch with it
            connection.execute("ALTER TABLE ket_jobs ADD CHECK (name <> 'app.refused')")
            batch = [NewJob(name="app.first"), NewJob(name="app.refused", unique_key="u")]
            with pytest.raises(StoreError, match="database error: CheckViolation"):
                store.job_insert_sync(connection, batch)
            assert connection.info.transaction_status == TransactionStatus.IDLE
        assert asyncio.run(_names(url, args)) == ["app.keyed"]
    finally:
        asyncio.run(store.close())


def test_async_psycopg_connections_and_sessions_carry_the_jobs_in_their_transaction(
    postgres: tuple[str, dict[str, str]],
) -> None:
    url, args = postgres

    async def scenario() -> None:
        store = await SqlStore.open(url, connect_args=args)
        engine = create_async_engine(async_url(url), connect_args=args)
        try:
            async with await psycopg.AsyncConnection.connect(
                url, options=args["options"]
            ) as connection:
                await store.job_insert_on(connection, [NewJob(name="app.psycopg")])
                await connection.rollback()
                await store.job_insert_on(connection, [NewJob(name="app.psycopg")] * 3)
                await connection.commit()
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, options=args["options"]
            ) as connection:
                await store.job_insert_on(connection, UNIQUE)  # its own transaction
            sessions = async_sessionmaker(engine)
            async with sessions() as session, session.begin():
                await store.job_insert_on(session, [NewJob(name="app.session")])
            with pytest.raises(RuntimeError):
                async with sessions() as session, session.begin():
                    await store.job_insert_on(session, [NewJob(name="app.lost")])
                    raise RuntimeError("rolled back")
        finally:
            await engine.dispose()
            await store.close()

    asyncio.run(scenario())
    assert asyncio.run(_names(url, args)) == ["app.keyed"] + ["app.psycopg"] * 3 + ["app.session"]


def test_a_connection_of_the_wrong_kind_is_refused_naming_it_and_what_is_taken(
    postgres: tuple[str, dict[str, str]],
) -> None:
    url, args = postgres

    async def scenario() -> None:
        store = await SqlStore.open(url, connect_args=args)
        try:
            with (
                psycopg.connect(url, options=args["options"]) as sync_connection,
                pytest.raises(
                    ConnectionRejected,
                    match=r"takes a SQLAlchemy AsyncConnection .*; got psycopg.Connection; a "
                    "synchronous connection goes to open_client's enqueue",
                ),
            ):
                await store.job_insert_on(sync_connection, [NewJob(name="app.no")])
            async with await psycopg.AsyncConnection.connect(
                url, options=args["options"]
            ) as async_connection:
                with pytest.raises(
                    ConnectionRejected,
                    match=r"takes a SQLAlchemy Connection, a psycopg 3 Connection.*; got "
                    "psycopg.AsyncConnection; an asyncio connection goes to open_async_client",
                ):
                    store.job_insert_sync(async_connection, [NewJob(name="app.no")])
            with pytest.raises(TypeError, match=r"got builtins.dict$"):
                await store.job_insert_on({}, [NewJob(name="app.no")])
        finally:
            await store.close()

    asyncio.run(scenario())
    assert asyncio.run(_names(url, args)) == []


def test_an_async_session_hints_the_control_channel_after_its_commit_and_never_before(
    postgres: tuple[str, dict[str, str]], postgres_url: str
) -> None:
    url, args = postgres
    name = f"ket_control_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    control = f"{postgres_url.rsplit('/', 1)[0]}/{name}"
    heard: list[str] = []

    async def scenario() -> None:
        listener = await psycopg.AsyncConnection.connect(control, autocommit=True)
        await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        channel = ControlChannel(libpq_dsn(parse_url(control)), "t1")
        store = await SqlStore.open(url, connect_args=args, channel=channel)
        engine = create_async_engine(async_url(url), connect_args=args)
        sessions = async_sessionmaker(engine)

        async def hear(wait: float) -> None:
            heard.extend([n.payload async for n in listener.notifies(timeout=wait)])

        try:
            with pytest.raises(RuntimeError):
                async with sessions() as session, session.begin():
                    await store.job_insert_on(session, [NewJob(name="app.lost", queue="lost")])
                    raise RuntimeError("rolled back")
            async with sessions() as session:
                async with session.begin():
                    await store.job_insert_on(session, [NewJob(name="app.kept", queue="kept")])
                    async with session.begin_nested():  # a savepoint released is no commit
                        await store.job_insert_on(session, [NewJob(name="app.kept", queue="also")])
                    await hear(0.5)
                    assert heard == []
                deadline = asyncio.get_running_loop().time() + 10
                while len(heard) < 2 and asyncio.get_running_loop().time() < deadline:
                    await hear(0.1)
        finally:
            await close_senders()
            await engine.dispose()
            await store.close()
            await listener.close()

    try:
        asyncio.run(scenario())
    finally:
        drop_database(postgres_url, name)
    assert sorted(heard) == ["t1:also", "t1:kept"]
    assert asyncio.run(_names(url, args)) == ["app.kept", "app.kept"]


def test_a_store_closed_right_after_an_enqueue_still_sends_its_hint(
    postgres: tuple[str, dict[str, str]], postgres_url: str
) -> None:
    """`asyncio.run(main())` whose last step enqueues and closes the client: the hint goes out
    before the loop ends (its sending task would otherwise be cancelled, and the job would wait
    for the tenant's safety visit)."""
    url, args = postgres
    name = f"ket_control_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    control = f"{postgres_url.rsplit('/', 1)[0]}/{name}"

    async def produce(queue: str) -> None:
        channel = ControlChannel(libpq_dsn(parse_url(control)), "t1")
        store = await SqlStore.open(url, connect_args=args, channel=channel)
        try:
            await store.job_insert([NewJob(name="app.kept", queue=queue)])
        finally:
            await store.close()

    try:
        with psycopg.connect(control, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            for queue in ("first", "second", "third"):  # a new event loop each time
                asyncio.run(produce(queue))
            heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=3)]
    finally:
        drop_database(postgres_url, name)
    assert heard == ["t1:first", "t1:second", "t1:third"]


def test_the_hint_connection_closes_when_idle_and_when_its_event_loop_ends(
    postgres: tuple[str, dict[str, str]], postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An application's hints go out on one connection to the control database; it closes
    after IDLE_SECONDS without a hint (sent again on a new one after that), and when
    `asyncio.run` ends the loop it was opened on (it was once left open, to be garbage)."""
    from ket.wakeup import control_channel

    monkeypatch.setattr(control_channel, "IDLE_SECONDS", 0.3)
    url, args = postgres
    name = f"ket_control_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    control = f"{postgres_url.rsplit('/', 1)[0]}/{name}"

    def backends() -> int:
        """Client connections to the control database (the test's listener among them)."""
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = %s AND backend_type = 'client backend'",
                [name],
            ).fetchone()
        assert row is not None
        return int(row[0])

    async def reaches(count: int) -> None:
        for _ in range(100):
            if await asyncio.to_thread(backends) == count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"{count} connection(s) to the control database expected")

    async def produce(queues: list[str], *, idle: bool) -> None:
        channel = ControlChannel(libpq_dsn(parse_url(control)), "t1")
        store = await SqlStore.open(url, connect_args=args, channel=channel)
        try:
            for queue in queues:
                await store.job_insert([NewJob(name="app.kept", queue=queue)])
                if idle:
                    await reaches(2)  # the listener and the hint connection
                    await reaches(1)  # idle: closed while the loop runs on
        finally:
            await store.close()

    try:
        with psycopg.connect(control, autocommit=True) as listener:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
            asyncio.run(produce(["first", "second"], idle=True))
            asyncio.run(produce(["third"], idle=False))  # its loop ends with the connection open
            left = backends()
            heard = [n.payload for n in listener.notifies(timeout=2.0, stop_after=3)]
    finally:
        drop_database(postgres_url, name)
    assert left == 1  # the listener alone: the hint connection closed with its loop
    assert heard == ["t1:first", "t1:second", "t1:third"]
