"""The tenant registry carrying the single tenant `default` over when the first tenant is added:
in one transaction, only while no tenant is registered, and checked like any tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ket.control.registry import Tenant, TenantRegistry
from ket.errors import StoreError

TEMPLATE = "postgresql://app@db/erp_{tenant}"
DEFAULT = Tenant(name="default")


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[TenantRegistry]:
    opened = TenantRegistry(f"sqlite:///{tmp_path / 'registry.db'}")
    try:
        yield opened
    finally:
        opened.close()


def test_the_first_tenant_brings_the_carried_one_with_it(registry: TenantRegistry) -> None:
    added = registry.add("acme", template=TEMPLATE, carried=DEFAULT)
    assert added == (DEFAULT, Tenant(name="acme"))
    assert registry.databases() == {"acme": None, "default": None}


def test_nothing_is_carried_once_a_tenant_is_registered(registry: TenantRegistry) -> None:
    registry.add("acme", template=TEMPLATE)
    # another `ket tenants add` may have registered the first tenant in the meantime
    assert registry.add("globex", template=TEMPLATE, carried=DEFAULT) == (Tenant(name="globex"),)
    assert registry.databases() == {"acme": None, "globex": None}


def test_a_tenant_on_the_carried_ones_database_is_refused_and_neither_registered(
    registry: TenantRegistry,
) -> None:
    taken = "postgresql://app@db/erp_default"
    shared = (
        r"'acme' would share its database \(postgresql://app@db/erp_default\) with tenant 'default'"
    )
    with pytest.raises(StoreError, match=shared):
        registry.check_new("acme", taken, template=TEMPLATE, carried=DEFAULT)
    with pytest.raises(StoreError, match=shared):
        registry.add("acme", taken, template=TEMPLATE, carried=DEFAULT)
    assert registry.databases() == {}


def test_the_carried_one_keeps_its_own_database_url(registry: TenantRegistry) -> None:
    single = Tenant(name="default", database_url="postgresql://app@db/erp")
    registry.add("acme", "postgresql://app@db/erp_acme", carried=single)
    assert registry.databases() == {
        "acme": "postgresql://app@db/erp_acme",
        "default": "postgresql://app@db/erp",
    }
