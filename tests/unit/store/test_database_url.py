"""Tenant names, URL templates, database identity and shown URLs (ket.store.tenant and
ket.connection.database_url)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ket.connection.database_url import (
    check_tenant_database,
    database_identity,
    render_database_url,
    shown_url,
)
from ket.errors import StoreError
from ket.store.tenant import check_tenant_name


@pytest.mark.parametrize("name", ["a", "acme", "acme-2", "acme_eu", "a" * 63, "default"])
def test_names_in_the_grammar_are_kept(name: str) -> None:
    assert check_tenant_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "1acme", "-acme", "_acme", "Acme", "a" * 64, "a.b", "a/b", "..", "a b", "acme\n", "é"],
)
def test_names_outside_the_grammar_are_refused_naming_them(name: str) -> None:
    with pytest.raises(StoreError) as refused:
        check_tenant_name(name)
    assert repr(name) in str(refused.value) and "[a-z][a-z0-9_-]{0,62}" in str(refused.value)


@pytest.mark.parametrize(
    "name", ["registry", "storage", "outbox", "postgres", "template0", "template1"]
)
def test_reserved_names_are_refused(name: str) -> None:
    with pytest.raises(StoreError, match=f"'{name}' is reserved"):
        check_tenant_name(name)


def test_a_template_renders_the_tenant_into_the_database_name_only() -> None:
    assert render_database_url("postgresql://app@db/erp_{tenant}", "acme") == (
        "postgresql://app@db/erp_acme"
    )
    assert render_database_url("sqlite:///.ket/{tenant}.db", "acme") == "sqlite:///.ket/acme.db"
    assert render_database_url("postgresql://app@db/erp", "acme") == "postgresql://app@db/erp"


@pytest.mark.parametrize(
    "template",
    [
        "postgresql://app@db/erp?application_name={tenant}",
        "postgresql://app@db/erp?{tenant}=1",
        "postgresql://app@{tenant}/erp",
        "postgresql://{tenant}@db/erp",
        "postgresql://app:{tenant}@db/erp",
        "sqlite:///{tenant}/jobs.db",
        "sqlite:///.ket/{tenant}/{tenant}.db",
    ],
)
def test_a_template_with_tenant_outside_the_database_name_is_refused(template: str) -> None:
    with pytest.raises(StoreError, match="may stand only in the database name"):
        render_database_url(template, "acme")


def test_a_template_with_tenant_in_its_port_does_not_parse() -> None:
    with pytest.raises(StoreError) as refused:
        render_database_url("postgresql://app:s3cret@db:{tenant}/erp", "acme")
    assert str(refused.value) == (
        "not a database URL: 'postgresql://app:***@db:{tenant}/erp' "
        "(invalid literal for int() with base 10: '{tenant}')"
    )


def test_a_password_is_never_shown() -> None:
    assert shown_url("postgresql://app:s3cret@db/erp") == "postgresql://app:***@db/erp"
    assert "s3cret" not in shown_url("postgresql://app@db/erp?password=s3cret")
    assert shown_url("smtp://app:s3cret@[::1") == "smtp://app:***@[::1"
    assert shown_url("postgresql://app:s3/cr@t@db:x/erp") == "postgresql://app:***@db:x/erp"
    assert shown_url("postgresql//app:s3cret@db/erp") == "postgresql//app:***@db/erp"
    assert shown_url("postgresql:/app:s3cret@db/erp") == "postgresql:***@db/erp"
    assert shown_url("pg//db/erp?sslpassword=s3cret") == "pg//db/erp?sslpassword=***"
    assert shown_url("host=db password='s3 cret' dbname=erp") == "host=db password=*** dbname=erp"
    assert shown_url("sqlite:///.ket/acme.db") == "sqlite:///.ket/acme.db"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:s3cret@db:port/erp",
        "postgresql://app:s3cret@[::1/x",
        "x",
        "pg://a:99999/b",
    ],
)
def test_a_malformed_url_is_a_store_error_without_its_password(url: str) -> None:
    with pytest.raises(StoreError, match="not a database URL") as refused:
        check_tenant_database(url)
    assert "s3cret" not in str(refused.value)


def test_one_database_has_one_identity_however_it_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    same = [
        "postgresql://app@127.0.0.1:5432/erp_acme",
        "postgresql+psycopg://other:pw@localhost/erp_acme",
        "postgres://app@/erp_acme?host=/var/run/postgresql",
        "postgresql://app@db.example/erp_beta?host=localhost&dbname=erp_acme",
    ]
    assert len({database_identity(url) for url in same}) == 1
    assert database_identity("postgresql://app@localhost/erp_beta") != database_identity(same[0])
    assert database_identity("postgresql://app@localhost:5433/erp_acme") != database_identity(
        same[0]
    )
    monkeypatch.chdir(tmp_path)
    files = [
        "sqlite:///.ket/acme.db",
        f"sqlite:///{tmp_path}/.ket/acme.db",
        "sqlite+aiosqlite:///./.ket/../.ket/acme.db",
    ]
    assert len({database_identity(url) for url in files}) == 1


def test_a_postgres_system_or_overlong_database_is_no_tenant_database() -> None:
    for name in ("postgres", "template0", "template1"):
        with pytest.raises(StoreError, match=f"PostgreSQL's own database '{name}'"):
            check_tenant_database(f"postgresql://app@db/{name}")
    with pytest.raises(StoreError, match="longer than PostgreSQL's 63 bytes"):
        check_tenant_database(f"postgresql://app@db/{'x' * 64}")
    with pytest.raises(StoreError, match="dbname parameter"):
        check_tenant_database("postgresql://app@db/erp_acme?dbname=erp_beta")
    check_tenant_database(f"postgresql://app@db/{'x' * 63}")
