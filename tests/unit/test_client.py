"""open_client and open_async_client before `ket migrate`: a producer never makes the tenant's
database (an empty file left behind would pass for one); it says to run `ket migrate`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from ket import define_deployment, define_job, define_module, open_async_client, open_client
from ket.errors import StoreError


async def send(ctx: Any, input: Any) -> None:
    return None


mail = define_module(
    name="mail",
    jobs={"send": define_job(queue="mail", input={"to": "string"}, idempotent=True, handler=send)},
)
APP = define_deployment(name="app", modules=[mail], worker={"queues": {"mail": 2}})


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder, the current one, with no database yet and no ket settings around."""
    (tmp_path / "pyproject.toml").write_text("[tool.ket]\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name in ("KET_DATABASE_URL", "KET_REGISTRY_URL"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_open_client_before_migrate_says_to_run_migrate_and_creates_no_file(
    project: Path,
) -> None:
    with pytest.raises(StoreError, match=r"default\.db.* run `ket migrate`$"):
        open_client(APP)
    assert not (project / ".ket").exists()


def test_open_client_on_a_missing_file_it_is_given_creates_none(project: Path) -> None:
    url = f"sqlite:///{project / 'shop.db'}"
    with pytest.raises(StoreError, match=r"shop\.db' does not exist"):
        open_client(APP, database_url=url)
    with pytest.raises(StoreError, match=r"shop\.db' does not exist"):
        asyncio.run(open_async_client(APP, database_url=url))
    assert sorted(path.name for path in project.iterdir()) == ["pyproject.toml"]


def test_open_client_connects_at_open_and_says_so_without_the_password(project: Path) -> None:
    """As open_async_client: an unreachable database fails the open, not the first enqueue
    (which then pays no set-up), and its message names no password."""
    url = "postgresql://app:s3cret-pw@127.0.0.1:1/erp"
    for opening in (
        lambda: open_client(APP, database_url=url),
        lambda: asyncio.run(open_async_client(APP, database_url=url)),
    ):
        with pytest.raises(StoreError) as raised:
            opening()
        assert "127.0.0.1" in str(raised.value) and "s3cret-pw" not in str(raised.value)
