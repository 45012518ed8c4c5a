"""Producing jobs from an application's own code: a Django view, a FastAPI endpoint, a script.

    client = open_client(erp, tenant="acme")
    client.enqueue("sales.send_confirmation", {"order_id": "o1"}, unique_key="confirmation:o1")
    with engine.begin() as conn:                       # the app's own transaction
        conn.execute(orders.update().where(...).values(status="confirmed"))
        client.enqueue("sales.send_confirmation", {"order_id": "o1"}, connection=conn)

A job enqueued with `connection=` exists if and only if that transaction commits. The
connection may be a SQLAlchemy `Connection`, a psycopg 3 `Connection` or Django's connection
(`aenqueue`: a SQLAlchemy `AsyncConnection` or `AsyncSession`, a psycopg 3 `AsyncConnection`):

    with transaction.atomic():                         # Django
        order = Order.objects.create(number="1001")
        client.enqueue("sales.send_confirmation", {"order_id": str(order.pk)},
                       connection=django.db.connection)

Django's connection and an `AsyncSession` wake the workers once they commit; on a SQLAlchemy
`Connection` or a psycopg connection ket cannot see the commit: call `client.wake()` after it.

Input is validated against the job's declaration (pydantic ValidationError naming the field);
an unknown job is refused, and so is a `connection=` of another kind (ConnectionRejected, a
TypeError, naming it) or on another database than the tenant's (ConnectionRejected naming
both: store/sql/app_database.py says what is compared); nothing is written in any of these cases.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from pydantic import BaseModel
from sqlalchemy.engine import Engine

from ket.catalog import Catalog, EnqueueOptions
from ket.connection.address import parse_url
from ket.connection.database_file import require_database
from ket.connection.database_url import PLACEHOLDER, parse_database_url
from ket.connection.engine import create_sync_engine
from ket.control.registry_reader import RegistryReader
from ket.declare.deployment import DeploymentDecl
from ket.due import RunAt, RunIn
from ket.errors import JobRejected, StoreError
from ket.runtime.events import Hooks, process_hooks, report_enqueued
from ket.runtime.tenancy import (
    DEFAULT_TENANT,
    check_registered,
    database_template,
    registry_url,
    resolve_tenants,
)
from ket.secret import Redactor, clear_secrets
from ket.store import validate
from ket.store.failure import translated
from ket.store.sql import SqlStore, insert_on
from ket.store.sql.app_connection import (
    AppConnection,
    AsyncAppConnection,
    app_connection,
    async_app_connection,
)
from ket.store.sql.app_database import (
    TenantDatabase,
    async_engine_database,
    engine_database,
    sqlite_file,
)
from ket.store.sql.failure import database_error
from ket.store.sql.gather import ThreadGather, gathers
from ket.store.sql.insert import wake_queues
from ket.store.sql.store import wakeups_of
from ket.store.tenant import check_tenant_name
from ket.store.types import Inserted, NewJob
from ket.wakeup.control_channel import ControlChannel, SyncHints, control_dsn
from ket.wakeup.local import WakePath

Input = BaseModel | Mapping[str, Any] | None
Item = tuple[str, Input] | tuple[str, Input, Mapping[str, Any]]


class _PayloadFree:
    """A failed insert as a ket error that carries no payload: the database's first line with
    the jobs' secret values hidden, and not chained to the driver's exception, whose text
    quotes every parameter of the statement (so a logged traceback would show the payloads).

    A class rather than a @contextmanager: every enqueue passes through it, and a generator's
    set-up costs more than the rest of it."""

    def __init__(self, jobs: Sequence[NewJob]) -> None:
        self._jobs = jobs

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if isinstance(error, StoreError):
            jobs = self._jobs
            hidden = Redactor.of(text for job in jobs for text in clear_secrets(job.payload))
            refused = JobRejected if isinstance(error, JobRejected) else StoreError
            raise refused(hidden(error.message)) from None


def _jobs(catalog: Catalog, items: Sequence[Item]) -> list[NewJob]:
    """The jobs of `items`, in their order; a run of items of one name without options is
    made together (Catalog.new_jobs: their inputs validated in one pass)."""
    new_job = catalog.new_job
    jobs: list[NewJob] = []
    start, count = 0, len(items)
    while start < count:
        item = items[start]
        if len(item) == 2:  # a plain index rather than `name, input, *rest = item`: no list
            name, end = item[0], start + 1
            while end < count and len(items[end]) == 2 and items[end][0] == name:
                end += 1
            if end - start > 1:
                jobs.extend(catalog.new_jobs(name, [items[n][1] for n in range(start, end)]))
            else:
                jobs.append(new_job(name, item[1]))
            start = end
            continue
        name, input, *rest = item
        jobs.append(new_job(name, input, EnqueueOptions.of(name, rest[0] if rest else None)))
        start += 1
    return jobs


def _url(tenant: str, database_url: str | None) -> str:
    """The tenant's database, by the CLI's rules: the tenant grammar; only a registered tenant
    (`default` alone when none is), and its own database if it has one; `{tenant}` only in a
    database name; no database another registered tenant has."""
    return _target(tenant, database_url)[0]


def _target(tenant: str, database_url: str | None) -> tuple[str, str | None]:
    """The tenant's database (as `_url`), and the control database the client hints the
    workers on after each commit: the registry's, once it lists tenants and both are on
    PostgreSQL (ket.wakeup.control_channel); else None."""
    check_tenant_name(tenant)
    # no registry: the single tenant `default`, as the workers see it (no worker would ever
    # serve a job enqueued for another name)
    registered = _registered(database_url) or {}
    url = _resolved(tenant, database_url, registered)
    return url, control_dsn(url, registry_url(database_url), registered=bool(registered))


def _resolved(tenant: str, database_url: str | None, registered: dict[str, str | None]) -> str:
    if database_url is not None and PLACEHOLDER not in database_url:
        check_registered(tenant, tuple(sorted(registered)))
        parse_database_url(database_url)  # a clear error for a malformed one, never a traceback
        url = database_url  # the caller's own choice of database, used as given
    else:
        template = database_template(database_url)
        url = resolve_tenants(registered, template, only=tenant).url_of(tenant)
    # a producer never makes the database: an empty file left behind would be taken for one
    require_database(url)
    return url


def _registered(database_url: str | None) -> dict[str, str | None] | None:
    """The registry's tenants, or None when there is no registry (no `.ket/registry.db`, no
    `ket_registry` database on a PostgreSQL server, nothing at KET_REGISTRY_URL)."""
    registry = RegistryReader(registry_url(database_url))
    try:
        return registry.listing()
    finally:
        registry.close()


class Client:
    """Enqueue jobs of one deployment into one tenant's database (synchronous)."""

    def __init__(
        self,
        catalog: Catalog,
        engine: Engine,
        path: WakePath,
        hints: SyncHints | None = None,
        *,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        self._catalog = catalog
        self._engine = engine
        self._tenant = tenant
        self._hooks = process_hooks()  # what `ket worker` emits to: `from ket import hooks`
        # the stores' one wake path (WakePath): this process's waiters, SQLite's other
        # processes through the wake folder, and with several tenants on PostgreSQL the
        # workers through the control database (`hints`, closed with the client)
        self._path = path
        self._hints = hints
        self._database = _tenant_database(tenant, engine.dialect.name, engine.url.database)
        # enqueues of many threads that arrive together commit together (gather.py)
        self._gather = ThreadGather(self._insert_own)

    def enqueue(
        self,
        name: str,
        input: Input = None,
        *,
        run_at: RunAt | None = None,
        run_in: RunIn | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        expires_in: RunIn | None = None,
        connection: object | None = None,
    ) -> Inserted:
        """Enqueue one job; returns its id and whether it coalesced with an active one.

        `connection`: the application's own SQLAlchemy `Connection`, psycopg 3 `Connection` or
        Django connection, whose transaction the job joins."""
        job = self._catalog.new_job(
            name,
            input,
            EnqueueOptions.given(
                run_at=run_at,
                run_in=run_in,
                priority=priority,
                unique_key=unique_key,
                company=company,
                tags=tags,
                expires_in=expires_in,
            ),
        )
        [inserted] = self._insert([job], connection)
        return inserted

    def enqueue_many(
        self, items: Sequence[Item], *, connection: object | None = None
    ) -> list[Inserted]:
        """Enqueue many jobs in one transaction: `(name, input)` or `(name, input, options)`."""
        return self._insert(_jobs(self._catalog, items), connection)

    def _insert(self, jobs: list[NewJob], connection: object | None) -> list[Inserted]:
        if connection is not None:
            # refused before the payload-free block, which would make it a plain JobRejected
            app = app_connection(connection)
            self._admit(app)
            with _PayloadFree(jobs):
                inserted = insert_on(app, jobs)
            if app.on_commit is not None:
                # Django: the workers are woken once the app's transaction commits (at once
                # outside atomic()); on any other connection ket cannot see the commit: the
                # app calls wake() after it, or the worker's poll or safety visit finds the job
                queues = wake_queues(jobs, None)
                app.on_commit(lambda: self._wake(queues))
            _report(self._hooks, self._tenant, jobs, inserted, app.on_commit)
            return inserted
        with _PayloadFree(jobs):
            payloads = validate.encode_payloads(jobs)  # a bad input fails its own caller
            if gathers(jobs):  # with other threads' enqueues that arrive meanwhile
                inserted = self._gather.insert(jobs, payloads)
            else:
                inserted = self._insert_own(jobs, payloads)
            self._wake(wake_queues(jobs, None))
            report_enqueued(self._hooks, self._tenant, jobs, inserted)  # committed
            return inserted

    def _insert_own(self, jobs: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        """Insert `jobs` in a transaction of the client's own."""
        # connecting and committing may fail too, outside insert_on's own translation
        with (
            translated(lambda error: database_error(error, self._engine)),
            self._engine.begin() as own,
        ):
            return insert_on(own, jobs, write_locked=True, payloads=payloads)

    def _admit(self, app: AppConnection) -> None:
        """ConnectionRejected unless `app` is on the tenant's database (asked once for each
        driver connection; the tenant's database once for the client)."""
        tenant = self._database
        if tenant.knows(app.driver):
            return
        if tenant.database is None:
            with (
                translated(lambda error: database_error(error, self._engine)),
                self._engine.connect() as own,
            ):
                tenant.database = engine_database(own)
        with translated(app.failure):
            found = app.database()
        tenant.admit(app.driver, found)

    def wake(self, jobs: Iterable[str] | None = None) -> None:
        """Wake the workers for jobs enqueued with `connection=` on a connection whose commit
        ket cannot see (SQLAlchemy's `Connection`, psycopg's): call it once the transaction
        has committed. `jobs`: the names enqueued (their queues are woken); None wakes every
        queue of the deployment. Without it such jobs wait for the worker's next poll or
        safety visit; Django's connection needs no call (its on_commit does it).

        A hint, not a promise: called before the commit, or for a rolled-back transaction,
        it costs the workers one claim that finds nothing."""
        self._wake(_queues(self._catalog, jobs))

    def _wake(self, queues: Collection[str]) -> None:
        """After a commit: the stores' wake path (the async client's store takes it itself)."""
        self._path.available(queues)

    def connect(self) -> None:
        """Open a connection to the tenant's database now, and the one its hints go out on:
        the first enqueue pays no set-up; StoreError if the database cannot be reached."""
        with (
            translated(lambda error: database_error(error, self._engine)),
            self._engine.connect(),
        ):
            pass  # back to the pool, open, for the first enqueue
        if self._hints is not None:
            self._hints.connect()

    def close(self) -> None:
        """Release the client's connections."""
        self._engine.dispose()
        if self._hints is not None:
            self._hints.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient:
    """Enqueue jobs of one deployment into one tenant's database (asyncio)."""

    def __init__(self, catalog: Catalog, store: SqlStore, *, tenant: str = DEFAULT_TENANT) -> None:
        self._catalog = catalog
        self._store = store
        self._tenant = tenant
        self._hooks = process_hooks()  # as Client's
        self._database = _tenant_database(tenant, store.dialect, store.url.database)

    async def aenqueue(
        self,
        name: str,
        input: Input = None,
        *,
        run_at: RunAt | None = None,
        run_in: RunIn | None = None,
        priority: int | None = None,
        unique_key: str | None = None,
        company: str | None = None,
        tags: list[str] | tuple[str, ...] | None = None,
        expires_in: RunIn | None = None,
        connection: object | None = None,
    ) -> Inserted:
        """Enqueue one job; returns its id and whether it coalesced with an active one.

        `connection`: the application's own SQLAlchemy `AsyncConnection` or `AsyncSession`, or
        psycopg 3 `AsyncConnection`, whose transaction the job joins."""
        job = self._catalog.new_job(
            name,
            input,
            EnqueueOptions.given(
                run_at=run_at,
                run_in=run_in,
                priority=priority,
                unique_key=unique_key,
                company=company,
                tags=tags,
                expires_in=expires_in,
            ),
        )
        [inserted] = await self._insert([job], connection)
        return inserted

    async def aenqueue_many(
        self, items: Sequence[Item], *, connection: object | None = None
    ) -> list[Inserted]:
        """Enqueue many jobs in one transaction: `(name, input)` or `(name, input, options)`."""
        return await self._insert(_jobs(self._catalog, items), connection)

    async def _insert(self, jobs: list[NewJob], connection: object | None) -> list[Inserted]:
        if connection is not None:
            app = await async_app_connection(connection)  # refused as in Client._insert
            await self._admit(app)
            with _PayloadFree(jobs):
                inserted = await self._store.job_insert_on(app, jobs)
            _report(self._hooks, self._tenant, jobs, inserted, app.on_commit)
            return inserted
        with _PayloadFree(jobs):
            inserted = await self._store.job_insert(jobs)
        report_enqueued(self._hooks, self._tenant, jobs, inserted)  # committed
        return inserted

    async def _admit(self, app: AsyncAppConnection) -> None:
        """Client._admit for asyncio."""
        tenant = self._database
        if tenant.knows(app.driver):
            return
        if tenant.database is None:
            engine = self._store.engine
            with translated(lambda error: database_error(error, engine)):
                async with engine.connect() as own:
                    tenant.database = await async_engine_database(own)
        with translated(app.failure):
            found = await app.database()
        tenant.admit(app.driver, found)

    async def awake(self, jobs: Iterable[str] | None = None) -> None:
        """Client.wake for asyncio: after the commit of a transaction on a psycopg
        `AsyncConnection` or SQLAlchemy `AsyncConnection` (an `AsyncSession` needs no call:
        its after_commit event does it)."""
        self._store.jobs_available(_queues(self._catalog, jobs))

    async def aclose(self) -> None:
        """Release the client's connections."""
        await self._store.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.aclose()


def open_client(
    deployment: DeploymentDecl, *, tenant: str = DEFAULT_TENANT, database_url: str | None = None
) -> Client:
    """A client for `tenant`; its database: `database_url`, else KET_DATABASE_URL, else default.
    It connects at once, as open_async_client does: the first enqueue pays no set-up, and an
    unreachable database is reported here (StoreError)."""
    # hide_parameters: SQLAlchemy's errors and logs never quote a job's payload
    url, control = _target(tenant, database_url)
    engine = create_sync_engine(url, hide_parameters=True)
    hints = SyncHints(control, tenant) if control is not None else None
    path = WakePath(wakeups_of(parse_url(url)), hints)
    client = Client(Catalog.build(deployment), engine, path, hints, tenant=tenant)
    try:
        client.connect()
    except BaseException:
        client.close()
        raise
    return client


async def open_async_client(
    deployment: DeploymentDecl, *, tenant: str = DEFAULT_TENANT, database_url: str | None = None
) -> AsyncClient:
    """The asyncio twin of open_client; it connects at once, so the first enqueue pays no
    set-up and an unreachable database is reported here."""
    url, control = await asyncio.to_thread(_target, tenant, database_url)
    channel = ControlChannel(control, tenant) if control is not None else None
    store = await SqlStore.open(url, channel=channel)
    try:
        await store.connect()
    except BaseException:
        await store.close()
        raise
    return AsyncClient(Catalog.build(deployment), store, tenant=tenant)


def _tenant_database(tenant: str, backend: str, database: str | None) -> TenantDatabase:
    """The tenant whose database `connection=` must be on; SQLite's is its file, known now
    (PostgreSQL's is asked of the server on the first `connection=`)."""
    return TenantDatabase(tenant, sqlite_file(database) if backend == "sqlite" else None)


def _queues(catalog: Catalog, jobs: Iterable[str] | None) -> set[str]:
    """The queues of the jobs named (JobRejected for a name not declared); None: every queue."""
    if jobs is None:
        return {spec.queue for spec in catalog.jobs.values()}
    return {catalog.job(name).queue for name in jobs}


def _report(
    hooks: Hooks,
    tenant: str,
    jobs: Sequence[NewJob],
    inserted: Sequence[Inserted],
    on_commit: Callable[[Callable[[], None]], None] | None,
) -> None:
    """The `enqueued` events of jobs inserted on the app's connection: once its transaction
    commits where ket can see that (Django's on_commit, an AsyncSession's after_commit); else
    now, at the insert, which is after the commit for a psycopg connection in autocommit mode
    (ket's own transaction) but before it for any other (the app may still roll back)."""
    if not hooks.wanted("enqueued"):
        return  # nobody listens: not even a callback for the commit
    if on_commit is None:
        report_enqueued(hooks, tenant, jobs, inserted)
    else:
        on_commit(lambda: report_enqueued(hooks, tenant, jobs, inserted))
