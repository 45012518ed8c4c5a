"""Resolving tenants to databases: the rules the CLI, the worker and open_client share."""

from __future__ import annotations

import pytest

from ket.errors import KetError, StoreError
from ket.runtime.tenancy import (
    Tenancy,
    control_url,
    registry_url,
    resolve_tenants,
    single_tenant_database,
)

TEMPLATE = "postgresql://app@db/erp_{tenant}"


def test_an_empty_registry_is_the_single_tenant_default() -> None:
    assert resolve_tenants({}, TEMPLATE) == Tenancy(
        urls={"default": "postgresql://app@db/erp_default"}
    )
    assert resolve_tenants({}, TEMPLATE, only="default").urls == {
        "default": "postgresql://app@db/erp_default"
    }


def test_an_unknown_tenant_names_the_registered_ones() -> None:
    with pytest.raises(KetError, match=r"'initech' is not registered \(tenants: acme, globex\)"):
        resolve_tenants({"globex": None, "acme": None}, TEMPLATE, only="initech")
    with pytest.raises(KetError, match="no tenant is, so the app runs as the single tenant"):
        resolve_tenants({}, TEMPLATE, only="acme")


def test_a_chosen_name_outside_the_grammar_is_refused_before_anything_else() -> None:
    with pytest.raises(StoreError, match=r"tenant name '\.\./\.\.'"):
        resolve_tenants({}, TEMPLATE, only="../..")


def test_tenants_on_one_database_are_all_refused_and_the_others_kept() -> None:
    found = resolve_tenants(
        {
            "acme": None,
            "beta": None,
            "gamma": "postgresql+psycopg://other:pw@db:5432/erp_beta",
        },
        TEMPLATE,
    )
    assert found.urls == {"acme": "postgresql://app@db/erp_acme"}
    assert set(found.refused) == {"beta", "gamma"}
    assert found.refused["gamma"].startswith("tenants beta, gamma resolve to one database")
    assert "pw" not in found.refused["gamma"]
    chosen = resolve_tenants(
        {"beta": None, "gamma": "postgresql://app@db/erp_beta"}, TEMPLATE, only="gamma"
    )
    assert chosen.urls == {} and set(chosen.refused) == {"gamma"}


def test_rows_the_registry_would_refuse_are_refused_with_the_reason() -> None:
    found = resolve_tenants(
        {
            "acme": None,
            "Bad Name": None,
            "registry": None,
            "sys": "postgresql://app@db/template1",
            "long": f"postgresql://app@db/{'x' * 64}",
        },
        TEMPLATE,
    )
    assert list(found.urls) == ["acme"]
    assert "must match" in found.refused["Bad Name"]
    assert "reserved" in found.refused["registry"]
    assert "PostgreSQL's own database 'template1'" in found.refused["sys"]
    assert "longer than PostgreSQL's 63 bytes" in found.refused["long"]
    assert found.registered == ("Bad Name", "acme", "long", "registry", "sys")


def test_a_template_is_refused_whole_when_it_cannot_serve_every_tenant() -> None:
    with pytest.raises(StoreError, match=r"has no \{tenant\}"):
        resolve_tenants({"acme": None, "globex": None}, "postgresql://app@db/erp")
    with pytest.raises(StoreError, match="in its host"):
        resolve_tenants({"acme": None}, "postgresql://app@{tenant}/erp")
    # a template no tenant uses is not read
    own = {"acme": "postgresql://app@db/acme", "globex": "postgresql://app@db/globex"}
    assert resolve_tenants(own, "postgresql://app@{tenant}/erp").urls == own


def test_on_postgresql_the_registry_defaults_to_ket_registry_on_the_same_server() -> None:
    template = "postgresql://app:s3cret@db:6432/erp_{tenant}?sslmode=require"
    expected = "postgresql://app:s3cret@db:6432/ket_registry?sslmode=require"
    assert registry_url(None, {"KET_DATABASE_URL": template}) == expected
    # the option wins over the environment, and a URL without {tenant} is a server too
    given = "postgresql+psycopg://app@other/erp"
    assert registry_url(given, {"KET_DATABASE_URL": template}) == (
        "postgresql+psycopg://app@other/ket_registry"
    )


def test_a_configured_registry_wins_and_sqlite_keeps_its_embedded_registry() -> None:
    template = "postgresql://app@db/erp_{tenant}"
    configured = {"KET_DATABASE_URL": template, "KET_REGISTRY_URL": "sqlite:///r.db"}
    assert registry_url(None, configured) == "sqlite:///r.db"
    sqlite = registry_url(None, {"KET_DATABASE_URL": "sqlite:///data/{tenant}.db"})
    assert sqlite.startswith("sqlite:///") and sqlite.endswith(".ket/registry.db")
    assert registry_url(None, {}).endswith(".ket/registry.db")


def test_the_control_database_is_the_registry_once_it_exists_else_the_default_tenant() -> None:
    template = "postgresql://app@db/erp_{tenant}"
    registry = "postgresql://app@db/ket_registry"
    assert control_url(template, registry, registry_exists=True) == registry
    assert control_url(template, registry, registry_exists=False) == (
        "postgresql://app@db/erp_default"
    )


def test_the_single_tenant_database_is_defaults_or_none_where_it_could_not_run() -> None:
    assert single_tenant_database(TEMPLATE) == "postgresql://app@db/erp_default"
    assert single_tenant_database("postgresql://app@db/erp") == "postgresql://app@db/erp"
    # a template `default` cannot use: it never ran there, so it has no jobs there
    assert single_tenant_database("postgresql://app@db/erp?application_name={tenant}") is None
    assert single_tenant_database("postgresql://app@db/" + "x" * 57 + "{tenant}") is None
