"""The tenant registry on a PostgreSQL server with no room for another connection: the worker's
reads of it (its report, the tenant refresh) fail with NoRoom, which the supervisor says as a
warning, not an error: nothing of ket's failed (docs/operations.md, Connections)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from ket.control.registry import TenantRegistry
from ket.control.registry_reader import RegistryReader
from ket.errors import NoRoom, StoreError


@pytest.fixture
def full_role(postgres_url: str) -> Iterator[str]:
    """A role the server lets open no connection (CONNECTION LIMIT 0): as a server whose
    max_connections are taken answers it, `too many connections for role`."""
    role = f"ket_full_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 's3cret' CONNECTION LIMIT 0")
    try:
        base = postgres_url.rsplit("@", 1)[1].rsplit("/", 1)[0]
        yield f"postgresql://{role}:s3cret@{base}/postgres"
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP ROLE "{role}"')


def test_a_registry_read_refused_for_want_of_room_is_no_room(full_role: str) -> None:
    with pytest.raises(NoRoom) as refused:
        RegistryReader(full_role).listing()
    text = str(refused.value)
    assert "cannot open the tenant registry" in text
    assert "too many connections for role" in text
    assert "s3cret" not in text


def test_opening_the_registry_refused_for_want_of_room_is_no_room(full_role: str) -> None:
    with pytest.raises(NoRoom) as refused:
        TenantRegistry(full_role)
    assert "s3cret" not in str(refused.value)


def test_any_other_failure_to_read_it_is_still_an_error() -> None:
    # nothing listens on port 1: refused, an error an operator must see
    with pytest.raises(StoreError) as failed:
        RegistryReader("postgresql://root@127.0.0.1:1/ket_registry").listing()
    assert not isinstance(failed.value, NoRoom)
    assert "cannot open the tenant registry" in str(failed.value)
