"""Tenants that try to share, redirect or escape a database, and URLs that try to show their
password: each attack is refused with a message naming the value (exit status 2 from the CLI),
and nothing is written: no registry row, no file, no database, no job in another tenant.

Run through the real CLI (a subprocess, in a project folder) and through `open_client`, on SQLite
and on PostgreSQL (real databases `ket_hostile_<random>_<tenant>`, dropped afterwards).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import create_engine, insert

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.catalog import Catalog
from ket.cli.main import main
from ket.control.registry import TenantRegistry
from ket.control.registry import tenants as tenant_table
from ket.errors import KetError, StoreError
from ket.runtime.fleet import Fleet
from ket.store.sql import SqlStore
from ket.testing import create_test_deployment
from ket.transport import CaptureSender
from tests.databases import drop_databases

APP_SOURCE = """
from ket import define_deployment, define_job, define_module

async def ping(ctx, input):
    return None

ping_job = define_job(idempotent=True, input={"n": "int"}, handler=ping)
app = define_module(name="app", jobs={"ping": ping_job})
main = define_deployment(
    name="main",
    modules=[app],
    worker={"queues": {"default": 1}, "tenant_refresh_ms": 100, "shutdown_grace_ms": 100},
)
"""


async def ping(ctx: Any, input: Any) -> None:
    return None


APP = define_deployment(
    name="main",
    modules=[
        define_module(
            name="app",
            jobs={"ping": define_job(idempotent=True, input={"n": "int"}, handler=ping)},
        )
    ],
    worker={"queues": {"default": 1}, "poll_min_ms": 10},
)
PASSWORD = "hunter2"
RESERVED = ["registry", "storage", "outbox", "postgres", "template0", "template1"]


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Project:
    """A project folder, the tenant databases of one backend, and a way to run `ket` in it."""

    root: Path
    backend: str
    template: str  # the {tenant} template, as the operator configured it
    admin_url: str = ""  # PostgreSQL: the server's maintenance database
    prefix: str = ""  # PostgreSQL: every database of this test starts so
    env: dict[str, str] = field(default_factory=dict)

    def ket(self, *args: str, env: dict[str, str] | None = None) -> Result:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        environment["PYTHONDONTWRITEBYTECODE"] = "1"
        environment.update(self.env)
        environment.update(env or {})
        done = subprocess.run(
            [sys.executable, "-m", "ket.cli.main", *args],
            cwd=self.root,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def url(self, tenant: str) -> str:
        """The tenant's database as the template gives it."""
        return self.template.replace("{tenant}", tenant)

    def other_spelling(self, tenant: str) -> str:
        """The same database, written as another operator might write it."""
        if self.backend == "sqlite":
            return f"sqlite:///{self.root}/.ket/../.ket/{tenant}.db"
        return f"postgresql+psycopg://root@localhost/{self.prefix}{tenant}"

    def databases(self) -> set[str]:
        """The tenant databases that exist: files under the project, or this test's databases."""
        if self.backend == "sqlite":
            return {str(p.relative_to(self.root)) for p in self.root.rglob("*.db")}
        with psycopg.connect(self.admin_url, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s", (self.prefix + "%",)
            ).fetchall()
        return {row[0] for row in rows}

    def jobs(self, tenant: str) -> list[tuple[Any, ...]]:
        """The tenant's job rows (id, name, payload)."""
        query = "SELECT id, name, payload FROM ket_jobs ORDER BY id"
        if self.backend == "sqlite":
            with closing(sqlite3.connect(self.root / ".ket" / f"{tenant}.db")) as connection:
                return connection.execute(query).fetchall()
        with psycopg.connect(self.url(tenant)) as connection:
            return [tuple(row) for row in connection.execute(query).fetchall()]

    def registry(self) -> list[tuple[str, str | None]]:
        registry = TenantRegistry(f"sqlite:///{self.root / '.ket' / 'registry.db'}")
        try:
            return [(t.name, t.database_url) for t in registry.list()]
        finally:
            registry.close()

    def files(self) -> set[str]:
        """Every file below the test's folder (the project's parent), to see what was created."""
        return {
            str(p.relative_to(self.root.parent))
            for p in self.root.parent.rglob("*")
            if "__pycache__" not in p.parts
        }

    def snapshot(self) -> tuple[Any, ...]:
        return (self.files(), self.databases(), self.registry())


def _write_project(root: Path) -> None:
    (root / "app").mkdir(parents=True)
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "workspace.py").write_text(textwrap.dedent(APP_SOURCE))
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project on the embedded default with no tenant registered yet."""
    root = tmp_path / "project"
    _write_project(root)
    for name in [k for k in os.environ if k.startswith("KET_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(root)
    return Project(root=root, backend="sqlite", template="sqlite:///.ket/{tenant}.db")


@pytest.fixture(params=["sqlite", "postgresql"])
def project(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Project]:
    """A project with tenant `beta` registered, migrated and holding one job."""
    root = tmp_path / "project"
    _write_project(root)
    for name in [k for k in os.environ if k.startswith("KET_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(root)  # open_client finds .ket/ (and its registry) here, as an app would
    if request.param == "sqlite":
        made = Project(root=root, backend="sqlite", template="sqlite:///.ket/{tenant}.db")
    else:
        admin = request.getfixturevalue("postgres_url")
        prefix = f"ket_hostile_{uuid.uuid4().hex[:8]}_"
        template = admin.rsplit("/", 1)[0] + f"/{prefix}{{tenant}}"
        # the project's own registry: ket's default on PostgreSQL, `ket_registry` on the
        # server, would be shared by every test running beside this one
        registry = f"sqlite:///{root}/.ket/registry.db"
        made = Project(
            root=root,
            backend="postgresql",
            template=template,
            admin_url=admin,
            prefix=prefix,
            env={"KET_DATABASE_URL": template, "KET_REGISTRY_URL": registry},
        )
        monkeypatch.setenv("KET_DATABASE_URL", template)
        monkeypatch.setenv("KET_REGISTRY_URL", registry)
    try:
        # the setting up, in this process (the environment and folder are the project's): the
        # tests run the CLI as a process for what they attack, not for this
        assert main(["tenants", "add", "beta"]) == 0
        assert main(["migrate", "--tenant", "beta"]) == 0
        with open_client(APP, tenant="beta") as client:
            client.enqueue("app.ping", {"n": 1})
        assert len(made.jobs("beta")) == 1
        yield made
    finally:
        if made.backend == "postgresql":
            drop_databases(made.admin_url, made.databases())


def _refused(result: Result, *named: str) -> None:
    """Exit status 2, one `ket: error:` line naming every value, no traceback."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err
    assert "error:" in result.err
    for value in named:
        assert value in result.err, (value, result.err)


# -- tenants that share a database ------------------------------------------------------------


def test_a_tenant_given_another_tenants_database_is_refused_naming_it(project: Project) -> None:
    before, beta_jobs = project.snapshot(), project.jobs("beta")
    for url in (project.url("beta"), project.other_spelling("beta")):
        result = project.ket("tenants", "add", "gamma", "--tenant-database-url", url)
        _refused(result, "'gamma'", "'beta'", "share")
        with pytest.raises(StoreError, match="'beta'"):
            registry = TenantRegistry(f"sqlite:///{project.root / '.ket' / 'registry.db'}")
            try:
                registry.add("gamma", url, template=project.template)
            finally:
                registry.close()
    # nor the registry's own database, however it is written
    for url in ("sqlite:///.ket/registry.db", f"sqlite:///{project.root}/.ket/./registry.db"):
        result = project.ket("tenants", "add", "gamma", "--tenant-database-url", url)
        _refused(result, "'gamma'", "the tenant registry's own database")
    assert project.snapshot() == before
    assert project.jobs("beta") == beta_jobs


TEMPLATES_WITH_TENANT_ELSEWHERE = [
    ("postgresql://root@127.0.0.1:5432/erp?application_name={tenant}", "query"),
    ("postgresql://root@127.0.0.1:5432/erp?dbname={tenant}", "query"),
    ("postgresql://root@{tenant}:5432/erp", "host"),
    ("postgresql://{tenant}@127.0.0.1:5432/erp", "user"),
    ("postgresql://root:{tenant}@127.0.0.1:5432/erp", "password"),
    ("sqlite:///.ket/{tenant}/jobs.db", "folder"),
    ("sqlite:///.ket/jobs.db?mode={tenant}", "query"),
]


def test_a_template_with_tenant_outside_the_database_name_is_refused(project: Project) -> None:
    before, beta_jobs = project.snapshot(), project.jobs("beta")
    for number, (template, part) in enumerate(TEMPLATES_WITH_TENANT_ELSEWHERE):
        shown = template.replace("{tenant}", "***") if part == "password" else template
        named = shown.split("?")[0].split("{")[0]
        added = project.ket("tenants", "add", "gamma", "--database-url", template)
        _refused(added, f"in its {part}", named)
        if number % 3 == 0:  # the same check behind every command: a few of them suffice
            migrated = project.ket("migrate", "--tenant", "beta", "--database-url", template)
            _refused(migrated, f"in its {part}", named)
        with pytest.raises(StoreError, match=f"in its {part}") as refused:
            open_client(APP, tenant="beta", database_url=template)
        assert named in str(refused.value)
    assert project.snapshot() == before
    assert project.jobs("beta") == beta_jobs


def _tenant_names_with_url_syntax(project: Project) -> list[str]:
    beta = f"{project.prefix}beta"
    return [
        f"x?dbname={beta}",
        "x?host=127.0.0.2",
        f"x&dbname={beta}",
        "../beta",
        "../.ket/beta",
        "beta/../beta",
        "Beta",
        "beta ",
        "beta\n",
        "",
        "a" * 64,
    ]


def test_a_tenant_name_carrying_url_syntax_is_refused_and_writes_nothing(
    project: Project,
) -> None:
    before, beta_jobs = project.snapshot(), project.jobs("beta")
    for name in _tenant_names_with_url_syntax(project):
        with pytest.raises(StoreError, match="tenant name") as refused:
            open_client(APP, tenant=name)
        assert repr(name) in str(refused.value)
        with pytest.raises(StoreError, match="tenant name"):
            asyncio.run(open_async_client(APP, tenant=name))
        with pytest.raises(StoreError, match="tenant name"):
            create_test_deployment(APP, tenant=name)
    for name in _tenant_names_with_url_syntax(project)[:4]:
        _refused(project.ket("jobs", "list", "--tenant", name), repr(name))
        _refused(project.ket("tenants", "add", name), repr(name))
    assert project.snapshot() == before
    assert project.jobs("beta") == beta_jobs


def test_path_like_tenants_never_create_a_file_outside_ket_with_an_empty_registry(
    bare: Project,
) -> None:
    operator, root = bare, bare.root
    before = operator.files()
    for name in ("../..", "../../evil", "..", "/tmp/evil", ".", "x/../../y"):
        _refused(operator.ket("migrate", "--tenant", name), repr(name))
        with pytest.raises(StoreError, match="tenant name"):
            open_client(APP, tenant=name)
    for command in (("worker",), ("call", "app.nothing", "{}"), ("jobs", "list"), ("dev",)):
        _refused(operator.ket(*command, "--tenant", "../.."), "'../..'")
    # an unknown tenant is no path to a new file either: the app's one tenant is `default`
    _refused(operator.ket("migrate", "--tenant", "acme"), "'acme'", "'default'")
    assert operator.files() - before <= {"project/.ket", "project/.ket/registry.db"}
    assert not (root / ".ket" / "acme.db").exists()


def test_reserved_tenant_names_are_refused_everywhere(project: Project) -> None:
    before, beta_jobs = project.snapshot(), project.jobs("beta")
    for name in RESERVED:
        _refused(project.ket("tenants", "add", name), repr(name), "reserved")
        with pytest.raises(StoreError, match="reserved"):
            open_client(APP, tenant=name)
        with pytest.raises(StoreError, match="reserved"):
            create_test_deployment(APP, tenant=name)
    for name in ("registry", "template1"):
        _refused(project.ket("jobs", "list", "--tenant", name), repr(name), "reserved")
    assert project.snapshot() == before
    assert project.jobs("beta") == beta_jobs


@pytest.mark.parametrize("project", ["postgresql"], indirect=True)
def test_a_postgres_system_database_as_a_tenant_database_is_refused(project: Project) -> None:
    before = project.snapshot()
    server = project.admin_url.rsplit("/", 1)[0]
    for system in ("postgres", "template0", "template1"):
        url = f"{server}/{system}"
        result = project.ket("tenants", "add", "gamma", "--tenant-database-url", url)
        _refused(result, repr(system), "PostgreSQL's own database")
    # and a template that can only give one of them
    result = project.ket("migrate", "--database-url", f"{server}/template1")
    _refused(result, "'template1'")
    assert project.snapshot() == before


@pytest.mark.parametrize("project", ["postgresql"], indirect=True)
def test_a_database_name_longer_than_postgres_keeps_is_refused(project: Project) -> None:
    before = project.snapshot()
    name = "g" * 63  # a valid tenant name; with the prefix, too long a database name
    _refused(project.ket("tenants", "add", name), "63 bytes", repr(project.prefix + name))
    assert project.snapshot() == before


def test_tenants_added_at_once_with_one_database_are_all_refused_but_one(project: Project) -> None:
    if project.backend == "sqlite":
        registry_url = f"sqlite:///{project.root / '.ket' / 'registry.db'}"
    else:  # the registry in PostgreSQL, as in production: its lock is what keeps them apart
        name = sql.Identifier(project.prefix + "r")
        with psycopg.connect(project.admin_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(name))
        registry_url = project.url("r")
    TenantRegistry(registry_url).close()  # its table exists before they race
    shared = project.url("shared")
    barrier = threading.Barrier(6, timeout=30)
    outcomes: list[str] = []

    def add(name: str) -> None:
        registry = TenantRegistry(registry_url)
        try:
            barrier.wait()
            registry.add(name, shared, template=project.template)
            outcomes.append("added")
        except StoreError as error:
            outcomes.append(error.message)
        finally:
            registry.close()

    threads = [threading.Thread(target=add, args=(f"t{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("added") == 1, outcomes
    assert all("would share its database" in o for o in outcomes if o != "added")


# -- unknown tenants --------------------------------------------------------------------------


def test_an_unknown_tenant_is_an_error_naming_the_registered_ones(project: Project) -> None:
    before = project.snapshot()
    for command in (("migrate",), ("jobs", "list"), ("worker",), ("call", "app.x", "{}")):
        _refused(project.ket(*command, "--tenant", "initech"), "'initech'", "tenants: beta")
    with pytest.raises(KetError, match=r"'initech' is not registered \(tenants: beta\)"):
        open_client(APP, tenant="initech")
    with pytest.raises(KetError, match="tenants: beta"):
        asyncio.run(open_async_client(APP, tenant="initech"))
    # an explicit database does not make an unregistered tenant known
    with pytest.raises(KetError, match="tenants: beta"):
        open_client(APP, tenant="initech", database_url=project.url("beta"))
    assert project.snapshot() == before


# -- a worker that finds tenants sharing a database -------------------------------------------


def _register_raw(project: Project, rows: dict[str, str | None]) -> None:
    """Rows the registry would refuse, as an older ket or a hand-written INSERT leaves them."""
    engine = create_engine(f"sqlite:///{project.root / '.ket' / 'registry.db'}")
    try:
        with engine.begin() as connection:
            connection.execute(
                insert(tenant_table),
                [
                    {"name": name, "database_url": url, "created_at": datetime.now(UTC)}
                    for name, url in rows.items()
                ],
            )
    finally:
        engine.dispose()


def test_a_worker_serves_neither_of_two_tenants_sharing_a_database_and_serves_the_others(
    project: Project, caplog: pytest.LogCaptureFixture
) -> None:
    assert project.ket("tenants", "add", "acme").code == 0
    assert project.ket("migrate", "--tenant", "acme").code == 0
    _register_raw(project, {"gamma": project.other_spelling("beta")})
    beta_jobs = project.jobs("beta")
    registry = TenantRegistry(f"sqlite:///{project.root / '.ket' / 'registry.db'}")

    async def tenants() -> dict[str, str | None]:
        return {t.name: t.database_url for t in await asyncio.to_thread(registry.list)}

    async def scenario() -> list[str]:
        fleet = Fleet(
            catalog=Catalog.build(APP),
            template=project.template,
            list_tenants=tenants,
            open_store=SqlStore.open,
            worker_id="w",
            sender=CaptureSender(),
        )
        stop = asyncio.Event()
        running = asyncio.ensure_future(fleet.run(stop))
        for _ in range(50):
            if fleet.workers:
                break
            await asyncio.sleep(0.05)
        await fleet.refresh()  # the next refreshes find the same rows: no new log line
        await fleet.refresh()
        served = sorted(fleet.workers)
        stop.set()
        await running
        return served

    caplog.set_level(logging.INFO, logger="ket")
    try:
        served = asyncio.run(scenario())
    finally:
        registry.close()
    assert served == ["acme"]
    refusals = [r.getMessage() for r in caplog.records if "resolve to one database" in r.message]
    # beta and gamma, each once over three refreshes, at ERROR
    assert len(refusals) == 2, refusals
    assert [r.levelno for r in caplog.records if "resolve to one" in r.message] == [40, 40]
    assert "not serving tenant 'beta': tenants beta, gamma resolve" in refusals[0]
    assert project.jobs("beta") == beta_jobs  # the job nobody may run is still there, unrun
    # the CLI says the same and keeps serving the others
    _refused(project.ket("jobs", "list", "--tenant", "gamma"), "'gamma'", "beta, gamma")
    migrated = project.ket("migrate")
    assert migrated.code == 0, migrated.err
    assert migrated.out == "tenant acme: up to date\n"
    assert "skipping tenant 'beta'" in migrated.err and "skipping tenant 'gamma'" in migrated.err
    with pytest.raises(StoreError, match="beta, gamma resolve to one database"):
        open_client(APP, tenant="beta")

    # and `ket worker` itself, refreshing its tenants ten times a second
    def add_delta() -> None:  # a tenant added meanwhile: the refreshes went on
        assert project.ket("tenants", "add", "delta").code == 0
        assert project.ket("migrate", "--tenant", "delta").code == 0

    log = _run_worker(project, during=add_delta, until="serving tenant delta")
    assert log.count("not serving tenant 'beta'") == 1, log
    assert log.count("not serving tenant 'gamma'") == 1, log
    assert "serving tenant acme" in log and "serving tenant delta" in log
    assert "serving tenant beta" not in log
    assert "Traceback" not in log
    assert project.jobs("beta") == beta_jobs


def _run_worker(project: Project, during: Callable[[], None], until: str) -> str:
    """Run `ket worker`, call `during` once it serves a tenant, stop it with SIGTERM once its log
    says `until` (and a few refreshes more); its log."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
    environment.update(project.env)
    out = project.root.parent / "worker.log"
    with out.open("w") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "ket.cli.main", "worker"],
            cwd=project.root,
            env=environment,
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            for expected in ("serving tenant", until):
                deadline = time.monotonic() + 30
                while expected not in out.read_text() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if expected != until:
                    during()
            time.sleep(0.5)
        finally:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
    return out.read_text()


# -- malformed URLs and passwords -------------------------------------------------------------

MALFORMED = [
    f"postgresql://app:{PASSWORD}@db:notaport/erp_{{tenant}}",
    f"postgresql://app:{PASSWORD}@[::1/erp_{{tenant}}",
    f"smtp://app:{PASSWORD}@[::1",
    f"postgresql://app:{PASSWORD}@db:99999/erp_{{tenant}}",
    f"postgresql//app:{PASSWORD}@db/erp_{{tenant}}",  # no ://
    f"postgresql:/app:{PASSWORD}@db/erp_{{tenant}}",
    f"host=db dbname=erp_{{tenant}} password={PASSWORD}",  # libpq's key=value form
    "not a url at all",
]


@pytest.mark.parametrize("url", MALFORMED)
def test_a_malformed_database_url_is_refused_without_a_traceback_or_its_password(
    bare: Project, url: str
) -> None:
    project = bare
    before = project.files()
    exact = url.replace("_{tenant}", "")
    for result in (
        project.ket("migrate", "--database-url", url),
        project.ket("tenants", "add", "gamma", "--tenant-database-url", exact),
        project.ket("tenants", "list", env={"KET_REGISTRY_URL": exact}),
    ):
        _refused(result, "URL")
        assert PASSWORD not in result.err + result.out
    for template in (url, url.replace("_{tenant}", "")):
        with pytest.raises(StoreError) as refused:
            open_client(APP, database_url=template)
        assert "URL" in str(refused.value) and PASSWORD not in str(refused.value)
    assert project.files() - before <= {"project/.ket", "project/.ket/registry.db"}


def test_a_url_missing_its_scheme_separator_is_named_with_only_its_password_hidden(
    bare: Project,
) -> None:
    result = bare.ket("migrate", "--database-url", f"postgresql//root:{PASSWORD}@127.0.0.1/x")
    _refused(result, "not a database URL: 'postgresql//root:***@127.0.0.1/x'")
    assert PASSWORD not in result.err + result.out


def test_tenants_list_hides_passwords_in_text_and_json(project: Project) -> None:
    if project.backend == "sqlite":
        own = f"sqlite:///{project.root}/.ket/../gamma.db"  # no password to hide on SQLite
        _register_raw(project, {"delta": f"postgresql://app:{PASSWORD}@127.0.0.1:1/delta"})
    else:
        own = project.url("gamma").replace("root@", f"root:{PASSWORD}@")
        _register_raw(project, {"delta": f"{project.url('delta')}?password={PASSWORD}"})
    added = project.ket("tenants", "add", "gamma", "--tenant-database-url", own)
    assert added.code == 0, added.err
    assert PASSWORD not in added.out + added.err
    _register_raw(project, {"zz\x1b[2J": None})  # a hand-written row that would clear a screen
    text = project.ket("tenants", "list")
    assert text.code == 0
    assert PASSWORD not in text.out and "***" in text.out
    assert "\x1b" not in text.out and "zz\\x1b[2J\t(from the template)" in text.out
    rows = json.loads(project.ket("tenants", "list", "--format", "json").out)
    assert PASSWORD not in json.dumps(rows)
    assert [row["name"] for row in rows] == ["beta", "delta", "gamma", "zz\x1b[2J"]
    assert "***" in {row["name"]: row["database_url"] for row in rows}["delta"]


def test_a_registry_that_cannot_be_opened_hides_its_password(bare: Project) -> None:
    project = bare
    for url in (
        f"postgresql://app:{PASSWORD}@127.0.0.1:1/registry?connect_timeout=2",
        f"postgresql://app@127.0.0.1:1/registry?connect_timeout=2&password={PASSWORD}",
    ):
        result = project.ket("tenants", "list", env={"KET_REGISTRY_URL": url})
        _refused(result, "cannot open the tenant registry", "127.0.0.1:1/registry")
        assert PASSWORD not in result.err


def test_migrate_and_the_worker_hide_the_password_of_a_database_they_cannot_reach(
    bare: Project, caplog: pytest.LogCaptureFixture
) -> None:
    project = bare
    unreachable = f"postgresql://app:{PASSWORD}@127.0.0.1:1/erp_{{tenant}}?connect_timeout=2"
    migrated = project.ket("migrate", "--database-url", unreachable)
    assert migrated.code == 2
    assert "Traceback" not in migrated.err and PASSWORD not in migrated.out + migrated.err
    caplog.set_level(logging.DEBUG, logger="ket")

    async def tenants() -> dict[str, str | None]:
        return {"beta": None, "gamma": unreachable.replace("{tenant}", "gamma")}

    async def scenario() -> None:
        fleet = Fleet(
            catalog=Catalog.build(APP),
            template=unreachable,
            list_tenants=tenants,
            open_store=SqlStore.open,
            worker_id="w",
            sender=CaptureSender(),
        )
        await fleet.refresh()  # both are served, and their loops fail to connect
        for _ in range(100):
            if "connection failed" in caplog.text:
                break
            await asyncio.sleep(0.05)
        for name in list(fleet.workers):
            await fleet.workers[name].stop(grace_seconds=0)
            await fleet.workers[name].store.close()

    asyncio.run(scenario())
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("connection failed" in r.getMessage() for r in failures)  # logged, and so:
    assert PASSWORD not in caplog.text


# -- file modes -------------------------------------------------------------------------------


def test_sqlite_databases_ket_creates_are_0600_in_a_0700_ket_folder(bare: Project) -> None:
    operator, root = bare, bare.root
    (root / ".ket").mkdir(mode=0o755)  # as an older ket, or a blob written first, left it
    old = os.umask(0o022)  # the usual umask, which would make them readable by everyone
    try:
        assert operator.ket("tenants", "add", "acme").code == 0
        assert operator.ket("migrate").code == 0
        with open_client(APP, tenant="acme") as client:
            client.enqueue("app.ping", {"n": 1})
        with closing(sqlite3.connect(root / ".ket" / "acme.db")) as reader:  # keeps the WAL
            reader.execute("SELECT count(*) FROM ket_jobs").fetchall()
            with open_client(APP, tenant="acme") as client:
                client.enqueue("app.ping", {"n": 2})
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (root / ".ket").iterdir()}
    finally:
        os.umask(old)
    assert stat.S_IMODE((root / ".ket").stat().st_mode) == 0o700
    databases = {name for name in modes if name.endswith((".db", "-wal", "-shm"))}
    assert {"registry.db", "acme.db", "acme.db-wal", "acme.db-shm"} <= databases
    assert {name: modes[name] for name in databases} == dict.fromkeys(databases, 0o600)
