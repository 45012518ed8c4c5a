"""Asking whether `ket migrate` installed ket in a tenant's database, which `ket tenants add`
does before carrying the single tenant over: never creating the database or its file."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.control.tenant_database import schema_installed
from ket.errors import StoreError
from tests.databases import drop_database


def test_a_migrated_database_has_the_schema(tenant_database: str) -> None:
    assert asyncio.run(schema_installed(tenant_database)) is True


def test_a_missing_or_empty_sqlite_file_has_none_and_none_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    assert asyncio.run(schema_installed(f"sqlite:///{missing}")) is False
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    assert asyncio.run(schema_installed(f"sqlite:///{empty}")) is False


def test_a_missing_or_unmigrated_postgresql_database_has_none(postgres_url: str) -> None:
    base = postgres_url.rsplit("/", 1)[0]
    name = f"kt_probe_{uuid.uuid4().hex[:8]}"
    assert asyncio.run(schema_installed(f"{base}/{name}")) is False
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        assert asyncio.run(schema_installed(f"{base}/{name}")) is False
    finally:
        drop_database(postgres_url, name)


def test_a_database_that_cannot_be_reached_is_an_error_without_its_password() -> None:
    with pytest.raises(StoreError, match=r"cannot read database 'postgresql://app:\*\*\*@") as e:
        asyncio.run(schema_installed("postgresql://app:hunter2@127.0.0.1:1/erp_default"))
    assert "hunter2" not in str(e.value)
