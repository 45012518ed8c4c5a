"""Projects and fresh tenant databases (SQLite and PostgreSQL) for the CLI's hostile-input tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from ket.store.sql import SqlStore
from tests.databases import drop_database

Seed = Callable[[SqlStore], Awaitable[None]]


@contextmanager
def fresh_database(request: pytest.FixtureRequest, tmp_path: Path, seed: Seed) -> Iterator[str]:
    """A migrated database (`request.param` is "sqlite" or "postgresql") seeded by `seed`, and
    dropped afterwards; its URL. PostgreSQL comes from the `postgres_url` fixture, so it skips,
    or fails under KET_REQUIRE_POSTGRES=1, when the server cannot be reached."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tenant.db'}"
        asyncio.run(_migrate_and_seed(url, seed))
        yield url
        return
    server: str = request.getfixturevalue("postgres_url")
    name = f"ket_hostile_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        asyncio.run(_migrate_and_seed(url, seed))
        yield url
    finally:
        drop_database(server, name)


async def _migrate_and_seed(url: str, seed: Seed) -> None:
    store = await SqlStore.open(url, migrate=True)
    try:
        await seed(store)
    finally:
        await store.close()


def write_project(root: Path, workspace: str) -> Path:
    """A project folder whose pyproject.toml points at app/workspace.py, holding `workspace`."""
    (root / "app").mkdir()
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
    (root / "app" / "__init__.py").write_text("")
    (root / "app" / "workspace.py").write_text(workspace)
    return root
