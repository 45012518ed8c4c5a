"""The registry's default on PostgreSQL: a database of its own on the tenants' server, created by
`ket tenants add` when ket may, and a clear error when it may not.

The default's name is `ket_registry`; each test here renames it (a database of the test's own)
so that tests running side by side on one server never share a registry.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.cli.main import main
from ket.runtime import tenancy
from tests.databases import drop_databases


@pytest.fixture
def server(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[str, str, list[str]]]:
    """The server's URL without a database, the registry's name for this test, and a list of
    databases to drop afterwards (the registry's among them)."""
    for name in [k for k in os.environ if k.startswith("KET_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    registry = f"ket_registry_{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(tenancy, "REGISTRY_DATABASE", registry)
    dropped = [registry]
    yield postgres_url.rsplit("/", 1)[0], registry, dropped
    drop_databases(postgres_url, dropped)


def _databases(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as admin:
        return {name for (name,) in admin.execute("SELECT datname FROM pg_database")}


def test_tenants_add_on_postgresql_creates_and_uses_the_registry_database_beside_them(
    server: tuple[str, str, list[str]],
    postgres_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base, registry, dropped = server
    prefix = f"kt_{uuid.uuid4().hex[:8]}"
    dropped.append(f"{prefix}_acme")
    template = ["--database-url", f"{base}/{prefix}_{{tenant}}"]
    assert registry not in _databases(postgres_url)
    assert main(["tenants", "add", "acme", *template]) == 0
    assert "tenant acme added (created its database)" in capsys.readouterr().out
    assert {registry, f"{prefix}_acme"} <= _databases(postgres_url)
    with psycopg.connect(f"{base}/{registry}") as connection:
        assert connection.execute("SELECT name FROM ket_tenants").fetchall() == [("acme",)]
    assert not (tmp_path / ".ket").exists()  # no embedded registry.db beside it

    assert main(["tenants", "list", *template, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"name": "acme", "database_url": None}]
    # the registry exists: it is the control database the workers record themselves in
    assert main(["workers", "list", *template]) == 0
    assert capsys.readouterr().out == f"no workers recorded in {base}/{registry}\n"


def test_listing_without_a_registry_creates_none(
    server: tuple[str, str, list[str]], postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base, registry, _ = server
    template = ["--database-url", f"{base}/kt_none_{{tenant}}"]
    assert main(["tenants", "list", *template]) == 0
    assert "no tenants registered" in capsys.readouterr().out
    assert main(["tenants", "remove", "acme", *template]) == 2
    assert registry not in _databases(postgres_url)


def test_a_role_that_cannot_create_the_registry_is_told_how_to_go_on(
    server: tuple[str, str, list[str]], postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base, registry, _ = server
    role = f"kt_role_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOCREATEDB PASSWORD 's3cret-pw'").format(
                sql.Identifier(role)
            )
        )
    try:
        host = base.split("@", 1)[1]
        template = f"postgresql://{role}:s3cret-pw@{host}/kt_nope_{{tenant}}"
        assert main(["tenants", "add", "acme", "--database-url", template]) == 2
        err = capsys.readouterr().err
        assert f"the tenant registry's database '{registry}' does not exist" in err
        assert f"CREATE DATABASE {registry}" in err
        assert "set KET_REGISTRY_URL" in err
        assert "s3cret-pw" not in err
        assert registry not in _databases(postgres_url)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
