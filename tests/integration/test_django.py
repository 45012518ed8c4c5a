"""Enqueue on Django's connection (tests/django_project): inside `transaction.atomic()` an order
and its job commit or roll back together; a real `ket worker` runs the job as soon as it
commits; with several tenants, Django's on_commit sends the control channel's hint after the
commit, never before, and that hint wakes a real worker; outside atomic() the job commits at
once; Django's SQLite connection, and
anything else that is no connection ket takes, is refused naming it; so is Django's connection
on another database than the client's, naming both.

Django is configured once per test process (tests/django_project/settings.py), and each test
points the `default` database at a fresh PostgreSQL database of its own, dropped afterwards.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ket import hooks, open_client
from ket.control.registry import TenantRegistry
from ket.errors import ConnectionRejected
from ket.store.sql import SqlStore
from ket.store.sql.insert import CHANNEL
from tests.conftest import migrated_postgres_database
from tests.databases import drop_database
from tests.django_project import settings as project_settings
from tests.django_project.workspace import main as DEPLOYMENT
from tests.faults.fleet import until

WORKSPACE = Path(__file__).parents[1] / "django_project" / "workspace.py"


@dataclass
class Shop:
    """The Django project on a database of its own: `url` for ket, `client` to enqueue."""

    url: str
    client: Any
    root: Path

    def rows(self, query: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url) as connection:
            return connection.execute(query).fetchall()

    def jobs(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [
            (row[0], row[1], row[2])
            for row in self.rows("SELECT name, state, payload FROM ket_jobs ORDER BY id")
        ]


def _create(server: str, name: str) -> str:
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{server.rsplit('/', 1)[0]}/{name}"


def _drop(server: str, name: str) -> None:
    drop_database(server, name)


def _use(server: str, name: str, url: str) -> None:
    """Django's `default` on database `name` (configuring Django on first use), migrated by
    Django (the shop) and by ket (its tables)."""
    project_settings.configure(server, name)
    from django.core.management import call_command
    from django.db import connections

    default = connections["default"]
    default.close()
    default.settings_dict["NAME"] = name
    call_command("migrate", "shop", database="default", verbosity=0)

    async def migrate() -> None:
        store = await SqlStore.open(url, migrate=True)
        await store.close()

    asyncio.run(migrate())


def _release() -> None:
    from django.db import connections

    connections["default"].close()


@pytest.fixture
def shop(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    """One tenant, `default`: no registry but an empty one of the test's own."""
    monkeypatch.setenv("KET_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")
    name = f"ket_django_{uuid.uuid4().hex[:10]}"
    url = _create(postgres_url, name)
    try:
        _use(postgres_url, name, url)
        with open_client(DEPLOYMENT, database_url=url) as client:
            yield Shop(url=url, client=client, root=tmp_path)
    finally:
        _release()
        _drop(postgres_url, name)


@pytest.fixture
def tenant_shop(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Shop]:
    """Tenant `t1` of a registry on PostgreSQL (so the client hints the control channel), its
    database the Django project's."""
    prefix = f"ket_djt_{uuid.uuid4().hex[:8]}_"
    registry = _create(postgres_url, prefix + "registry")
    url = _create(postgres_url, prefix + "t1")
    monkeypatch.setenv("KET_REGISTRY_URL", registry)
    try:
        tenants = TenantRegistry(registry)
        try:
            tenants.add("t1")
        finally:
            tenants.close()
        _use(postgres_url, prefix + "t1", url)
        template = f"{postgres_url.rsplit('/', 1)[0]}/{prefix}{{tenant}}"
        with open_client(DEPLOYMENT, tenant="t1", database_url=template) as client:
            yield Shop(url=url, client=client, root=tmp_path)
    finally:
        _release()
        for database in ("t1", "registry"):
            _drop(postgres_url, prefix + database)


def _order(number: str) -> Any:
    from tests.django_project.shop.models import Order

    return Order.objects.create(number=number)


def test_a_rolled_back_atomic_block_leaves_neither_the_order_nor_its_job(shop: Shop) -> None:
    from django.db import connection, transaction

    with pytest.raises(RuntimeError, match="payment declined"), transaction.atomic():
        order = _order("1001")
        shop.client.enqueue("shop.confirm", {"order_id": str(order.pk)}, connection=connection)
        raise RuntimeError("payment declined")
    assert shop.rows("SELECT number FROM shop_order") == []
    assert shop.jobs() == []


def test_the_enqueued_event_waits_for_djangos_commit_and_a_rollback_sends_none(
    shop: Shop,
) -> None:
    from django.db import connection, transaction

    seen: list[tuple[int | None, int]] = []  # the job, and how many jobs were committed then
    unsubscribe = hooks.subscribe(
        lambda event: seen.append((event.job_id, len(shop.jobs()))), ["enqueued"]
    )
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            shop.client.enqueue("shop.confirm", {"order_id": "lost"}, connection=connection)
            raise RuntimeError("payment declined")
        with transaction.atomic():
            kept = shop.client.enqueue("shop.confirm", {"order_id": "1"}, connection=connection)
            assert seen == []  # not before the commit
    finally:
        unsubscribe()
    assert seen == [(kept.id, 1)]  # after it: another connection saw the job


@contextmanager
def _worker(shop: Shop, database_url: str, tenant: str) -> Iterator[None]:
    """A real `ket worker` serving the shop, until the block ends; it must stop cleanly."""
    log = shop.root / "worker.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    env.update(
        KET_DATABASE_URL=database_url,
        KET_REGISTRY_URL=os.environ["KET_REGISTRY_URL"],
        KET_TEST_SHOP_URL=shop.url,
    )
    with log.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker", "--workspace", str(WORKSPACE)],
            cwd=shop.root,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        until(lambda: f"serving tenant {tenant}" in log.read_text(), 60, "the worker to serve")
        yield
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
    assert code == 0, log.read_text()


def _completed(shop: Shop, job_id: int, within: float) -> None:
    until(
        lambda: shop.rows(f"SELECT state FROM ket_jobs WHERE id = {job_id}") == [("completed",)],
        within,
        f"the worker to run job {job_id}",
    )


def test_a_committed_atomic_block_keeps_both_and_a_worker_runs_the_job_at_once(
    shop: Shop,
) -> None:
    from django.db import connection, transaction

    with _worker(shop, shop.url, "default"):
        with transaction.atomic():
            order = _order("1002")
            inserted = shop.client.enqueue(
                "shop.confirm", {"order_id": str(order.pk)}, connection=connection
            )
            # nothing is visible to others before the commit
            assert shop.rows("SELECT count(*) FROM ket_jobs") == [(0,)]
        assert shop.rows("SELECT number FROM shop_order") == [("1002",)]
        # the worker polls every 30 s: within 20 s only the commit's NOTIFY can have woken it
        _completed(shop, inserted.id, 20)
    # the handler found the committed order and confirmed it
    assert shop.rows("SELECT status FROM shop_order") == [("confirmed",)]


def test_with_tenants_the_on_commit_hint_wakes_a_worker_that_listens_on_the_control_database(
    tenant_shop: Shop,
) -> None:
    from django.db import connection, transaction

    template = f"{tenant_shop.url.rsplit('_', 1)[0]}_{{tenant}}"
    with _worker(tenant_shop, template, "t1"):
        # a first job, enqueued alone, shows the worker listening (and its first visit of the
        # tenant is over: the next comes 24 s or more later)
        first = _order("2002")
        _completed(
            tenant_shop,
            tenant_shop.client.enqueue("shop.confirm", {"order_id": str(first.pk)}).id,
            20,
        )
        with transaction.atomic():
            order = _order("2003")
            inserted = tenant_shop.client.enqueue(
                "shop.confirm", {"order_id": str(order.pk)}, connection=connection
            )
        # no poll, and the tenant's NOTIFY reaches no listener: only the hint can wake it
        _completed(tenant_shop, inserted.id, 15)
    assert tenant_shop.rows("SELECT status FROM shop_order") == [("confirmed",), ("confirmed",)]


def test_outside_atomic_the_job_commits_at_once_with_unique_keys_coalescing(shop: Shop) -> None:
    from django.db import connection

    order = _order("1003")
    first = shop.client.enqueue(
        "shop.confirm", {"order_id": str(order.pk)}, unique_key="c:1003", connection=connection
    )
    again = shop.client.enqueue(
        "shop.confirm", {"order_id": str(order.pk)}, unique_key="c:1003", connection=connection
    )
    assert (again.id, again.coalesced) == (first.id, True)
    many = shop.client.enqueue_many(
        [("shop.confirm", {"order_id": str(n)}) for n in range(5)], connection=connection
    )
    assert len({i.id for i in many}) == 5
    # committed: a connection of another process sees them
    assert len(shop.jobs()) == 6
    assert connection.get_autocommit() and not connection.in_atomic_block


def test_on_commit_sends_the_control_channels_hint_after_the_commit(tenant_shop: Shop) -> None:
    from django.db import connection, transaction

    control = os.environ["KET_REGISTRY_URL"]
    with psycopg.connect(control, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        heard: list[str] = []

        def hear(wait: float) -> list[str]:
            """Every hint heard so far, after waiting up to `wait` seconds for more."""
            select.select([listener.fileno()], [], [], wait)
            heard.extend(n.payload for n in listener.notifies(timeout=0, stop_after=0))
            return heard

        with pytest.raises(RuntimeError), transaction.atomic():
            order = _order("2001")
            tenant_shop.client.enqueue(
                "shop.confirm", {"order_id": str(order.pk)}, connection=connection
            )
            raise RuntimeError("rolled back")
        with transaction.atomic():
            order = _order("2002")
            tenant_shop.client.enqueue(
                "shop.confirm", {"order_id": str(order.pk)}, connection=connection
            )
            hear(0.5)
            assert heard == []  # not before the commit (nor for the rolled-back job)
        until(lambda: hear(0.1) == ["t1:default"], 10, "the hint after the commit")
    assert [state for _, state, _ in tenant_shop.jobs()] == ["available"]


def test_a_django_sqlite_connection_is_refused_and_nothing_is_written(shop: Shop) -> None:
    from django.db import connections

    with pytest.raises(ConnectionRejected, match=r"Django's connection 'lite' is on sqlite"):
        shop.client.enqueue("shop.confirm", {"order_id": "1"}, connection=connections["lite"])
    assert shop.jobs() == []


@pytest.mark.parametrize(
    "given",
    [object(), "postgresql://root@127.0.0.1/app"],
    ids=["object", "url"],
)
def test_anything_else_as_connection_is_a_type_error_naming_it(shop: Shop, given: object) -> None:
    kind = f"{type(given).__module__}.{type(given).__qualname__}"
    with pytest.raises(TypeError, match=rf"connection= takes .*psycopg 3.*; got {kind}$"):
        shop.client.enqueue("shop.confirm", {"order_id": "1"}, connection=given)
    assert shop.jobs() == []


def test_djangos_connection_on_another_database_is_refused_naming_both(
    shop: Shop, postgres_url: str
) -> None:
    """A client of another database, given Django's: its job went into the shop's table, for
    the shop's workers, with no error (the shop's own client, above, still enqueues on it)."""
    from django.db import connections, transaction

    with (
        migrated_postgres_database(postgres_url, "ket_other") as other,
        open_client(DEPLOYMENT, database_url=other) as client,
    ):
        for _ in range(2):  # Django reconnects: its new connection is asked again
            with transaction.atomic(), pytest.raises(ConnectionRejected) as refused:
                client.enqueue("shop.confirm", {"order_id": "1"}, connection=connections["default"])
            connections["default"].close()
        assert shop.rows("SELECT count(*) FROM ket_jobs") == [(0,)]
    [(port,)] = shop.rows("SHOW port")  # the server's, not the URL's
    assert refused.value.message.startswith(
        f"connection= is on database {shop.url.rsplit('/', 1)[1]!r} (port {port}) but this "
        f"client writes tenant 'default', on database {other.rsplit('/', 1)[1]!r} (port {port})"
    )
