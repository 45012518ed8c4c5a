"""`ket tenants` on a project that ran as the single tenant `default`: adding the first tenant
carries `default` over, so the jobs queued before it keep running; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ..databases import drop_databases
from ..processes import terminated
from .conftest import Project, Result, run_ket

APP = """
from ket import define_deployment, define_function, define_job, define_module

async def order(ctx, input):
    job = await ctx.jobs.enqueue("shop.ship", {"n": input.n})
    return {"job": job.id}

async def ship(ctx, input):
    ctx.log.info("shipped", n=input.n)

shop = define_module(
    name="shop",
    functions={
        "order": define_function(input={"n": "int"}, effects=["enqueue:shop.ship"], handler=order),
    },
    jobs={"ship": define_job(idempotent=True, input={"n": "int"}, handler=ship)},
)
main = define_deployment(
    name="main",
    modules=[shop],
    worker={
        "queues": {"default": 2},
        "poll_min_ms": 10,
        "poll_max_ms": 200,
        "tenant_refresh_ms": 200,
    },
)
"""
SECRET = "s3cret-pw"


@dataclass(frozen=True, kw_only=True)
class Shop:
    """A project on one backend: the `ket` command run in it, with its environment."""

    root: Path
    backend: str
    template: str
    env: dict[str, str] = field(default_factory=dict)

    def url(self, tenant: str) -> str:
        """The database `tenant` gets from the project's template."""
        return self.template.replace("{tenant}", tenant)

    def shown(self, tenant: str) -> str:
        """That database as `ket tenants` prints it: a file by its path in the project."""
        if self.backend == "sqlite":
            return f".ket/{tenant}.db"
        return self.url(tenant).replace(SECRET, "***")

    def ket(self, *args: str, env: dict[str, str] | None = None) -> Result:
        result = run_ket(*args, cwd=self.root, env={**self.env, **(env or {})})
        assert SECRET not in result.out + result.err
        assert "Traceback" not in result.err
        return result

    def jobs(self, tenant: str, *options: str) -> list[dict[str, Any]]:
        listed = self.ket("jobs", "list", "--tenant", tenant, "--format", "json", *options)
        assert listed.code == 0, listed.err
        rows: list[dict[str, Any]] = json.loads(listed.out)
        return rows

    def worker(self) -> subprocess.Popen[str]:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        return subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker"],
            cwd=self.root,
            env={**environment, **self.env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, project: Project) -> Iterator[Shop]:
    """The project: on the embedded default, or on databases of its own on the test server
    (`default`'s created as an operator would, the others by `ket tenants add`)."""
    root = project({"app/workspace.py": APP})
    if request.param == "sqlite":
        yield Shop(root=root, backend="sqlite", template=f"sqlite:///{root}/.ket/{{tenant}}.db")
        return
    admin: str = request.getfixturevalue("postgres_url")
    prefix = f"kt_first_{uuid.uuid4().hex[:8]}_"
    # the server trusts its local users: the password is there to be hidden, not checked
    base = admin.rsplit("/", 1)[0].replace("://root@", f"://root:{SECRET}@")
    # a registry of the test's own: ket's default, `ket_registry`, is shared by the server
    names = [f"{prefix}{tenant}" for tenant in ("registry", "default", "acme")]
    with psycopg.connect(admin, autocommit=True) as connection:
        for name in names[:2]:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    template = f"{base}/{prefix}{{tenant}}"
    env = {"KET_DATABASE_URL": template, "KET_REGISTRY_URL": f"{base}/{prefix}registry"}
    try:
        yield Shop(root=root, backend="postgresql", template=template, env=env)
    finally:
        drop_databases(admin, names)


def _wait_for_completed(
    shop: Shop, tenant: str, count: int = 1, timeout: float = 30.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = shop.jobs(tenant, "--state", "completed")
        if len(done) >= count:
            return done
        time.sleep(0.2)
    raise AssertionError(f"{count} jobs of tenant {tenant!r} not completed within {timeout} s")


def test_adding_the_first_tenant_keeps_the_jobs_of_default_running(shop: Shop) -> None:
    assert shop.ket("migrate").code == 0
    called = shop.ket("call", "shop.order", '{"n": 1}')
    assert called.code == 0, called.err
    [queued] = shop.jobs("default")
    assert (queued["name"], queued["state"]) == ("shop.ship", "available")

    added = shop.ket("tenants", "add", "acme")
    assert added.code == 0, added.err
    assert added.out.splitlines()[1] == (
        "registered tenant 'default' too: it holds the jobs of this project before it had "
        f"tenants ({shop.shown('default')})"
    )
    listed = shop.ket("tenants", "list")
    assert [line.split("\t")[0] for line in listed.out.splitlines()] == ["acme", "default"]
    migrated = shop.ket("migrate").out.splitlines()
    assert [line.split(": ")[0] for line in migrated] == ["tenant acme", "tenant default"]
    assert migrated[0].startswith("tenant acme: applied migrations [1, ")
    assert migrated[1] == "tenant default: up to date"

    assert [job["id"] for job in shop.jobs("default")] == [queued["id"]]
    worker = shop.worker()
    try:
        [completed] = _wait_for_completed(shop, "default")
        output = terminated(worker)
    finally:
        worker.kill()
    assert completed["id"] == queued["id"]
    assert worker.returncode == 0, output
    assert shop.jobs("acme") == []


def test_a_running_worker_keeps_serving_default_once_the_first_tenant_is_added(
    shop: Shop,
) -> None:
    assert shop.ket("migrate").code == 0
    worker = shop.worker()
    try:
        assert shop.ket("call", "shop.order", '{"n": 1}').code == 0
        _wait_for_completed(shop, "default")
        assert shop.ket("tenants", "add", "acme").code == 0
        assert shop.ket("migrate", "--tenant", "acme").code == 0
        time.sleep(0.5)  # past the worker's tenant refresh (200 ms): it has read the registry
        for tenant in ("default", "acme"):
            called = shop.ket("call", "shop.order", '{"n": 2}', "--tenant", tenant)
            assert called.code == 0, called.err
        assert len(_wait_for_completed(shop, "default", count=2)) == 2
        assert len(_wait_for_completed(shop, "acme")) == 1
        output = terminated(worker)
    finally:
        worker.kill()
    assert worker.returncode == 0, output
    # served throughout: never stopped, never started again
    assert "tenant default was removed" not in output
    assert output.count("serving tenant default\n") == 1, output


def test_a_default_never_migrated_is_not_carried_over(shop: Shop) -> None:
    # on PostgreSQL its database exists (the fixture made it) but holds no ket tables
    added = shop.ket("tenants", "add", "acme")
    assert added.code == 0, added.err
    assert "default" not in added.out
    assert shop.ket("tenants", "list").out.split("\t")[0] == "acme"
    refused = shop.ket("jobs", "list", "--tenant", "default")
    assert (refused.code, refused.err) == (
        2,
        "ket: error: tenant 'default' is not registered (tenants: acme)\n",
    )


def test_default_registered_first_is_not_carried_over_again(shop: Shop) -> None:
    assert shop.ket("migrate").code == 0
    assert shop.ket("call", "shop.order", '{"n": 1}').code == 0
    first = shop.ket("tenants", "add", "default")
    assert first.code == 0, first.err
    assert first.out.startswith("tenant default added (")
    assert len(first.out.splitlines()) == 1
    second = shop.ket("tenants", "add", "acme")
    assert second.code == 0, second.err
    assert len(second.out.splitlines()) == 1
    listed = shop.ket("tenants", "list").out.splitlines()
    assert listed == ["acme\t(from the template)", "default\t(from the template)"]
    assert len(shop.jobs("default")) == 1


def test_a_url_without_tenant_keeps_default_on_it_and_asks_for_the_new_ones(
    shop: Shop,
) -> None:
    single = {"KET_DATABASE_URL": shop.url("default")}
    assert shop.ket("migrate", env=single).code == 0
    assert shop.ket("call", "shop.order", '{"n": 1}', env=single).code == 0
    # the usual advice, put {tenant} in the URL, would move `default` off its jobs
    refused = shop.ket("tenants", "add", "acme", env=single)
    assert refused.code == 2
    assert refused.err == (
        f"ket: error: database URL {shop.url('default').replace(SECRET, '***')!r} has no "
        "{tenant}: it is the database of tenant 'default', which holds this project's jobs, "
        "and every tenant would share it; give 'acme' a database of its own (`ket tenants add "
        "acme --tenant-database-url URL`), and 'default' is registered with this one\n"
    )
    assert "no tenants registered" in shop.ket("tenants", "list", env=single).out
    added = shop.ket(
        "tenants", "add", "acme", "--tenant-database-url", shop.url("acme"), env=single
    )
    assert added.code == 0, added.err
    assert "registered tenant 'default' too" in added.out
    # registered with its URL: the template, given {tenant} later, renders another database
    listed = shop.ket("tenants", "list", "--format", "json").out
    assert json.loads(listed) == [
        {"name": "acme", "database_url": shop.url("acme").replace(SECRET, "***")},
        {"name": "default", "database_url": shop.url("default").replace(SECRET, "***")},
    ]
    assert shop.ket("migrate").code == 0
    assert len(shop.jobs("default")) == 1


def test_removing_the_last_tenant_says_the_app_runs_as_default_again(shop: Shop) -> None:
    assert shop.ket("migrate").code == 0
    assert shop.ket("call", "shop.order", '{"n": 1}').code == 0
    assert shop.ket("tenants", "add", "acme").code == 0
    assert shop.ket("tenants", "remove", "acme").out == (
        "tenant acme removed (its database was left in place)\n"
    )
    removed = shop.ket("tenants", "remove", "default")
    assert removed.out.splitlines() == [
        "tenant default removed (its database was left in place)",
        "no tenant is registered now: the app runs as the single tenant 'default' again "
        f"({shop.shown('default')})",
    ]
    # the same database as before the first tenant: its job is there, without --tenant
    [job] = json.loads(shop.ket("jobs", "list", "--format", "json").out)
    assert job["name"] == "shop.ship"
    # and the next first tenant carries it over once more
    assert "registered tenant 'default' too" in shop.ket("tenants", "add", "acme").out


def test_registering_default_elsewhere_warns_that_its_jobs_stay_behind(
    project: Project, tmp_path: Path
) -> None:
    root = project({"app/workspace.py": APP})
    assert run_ket("migrate", cwd=root).code == 0
    elsewhere = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    added = run_ket("tenants", "add", "default", "--tenant-database-url", elsewhere, cwd=root)
    assert added.code == 0, added.err
    assert added.err == (
        "ket: warning: tenant 'default' ran on .ket/default.db until now; the jobs there stay "
        f"there, and it now runs on {elsewhere}\n"
    )


def test_a_default_that_cannot_be_reached_is_not_left_behind_unasked(
    project: Project, tmp_path: Path
) -> None:
    root = project({"app/workspace.py": APP})
    env = {
        "KET_DATABASE_URL": f"postgresql://root:{SECRET}@127.0.0.1:1/shop_{{tenant}}",
        "KET_REGISTRY_URL": f"sqlite:///{tmp_path / 'registry.db'}",
    }
    own = f"sqlite:///{tmp_path / 'acme.db'}"
    refused = run_ket("tenants", "add", "acme", "--tenant-database-url", own, cwd=root, env=env)
    assert refused.code == 2
    assert refused.err.startswith(
        "ket: error: cannot tell whether tenant 'default', this project's single tenant so "
        "far, has jobs to keep: cannot read database "
        "'postgresql://root:***@127.0.0.1:1/shop_default': "
    )
    assert refused.err.endswith(
        "; run this again once its database answers, or register it first "
        "(`ket tenants add default`)\n"
    )
    assert SECRET not in refused.err
    assert len(refused.err.splitlines()) == 1
    assert "no tenants registered" in run_ket("tenants", "list", cwd=root, env=env).out
