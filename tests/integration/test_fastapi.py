"""The FastAPI example (tests/fastapi_project/app.py, as in docs/jobs.md) against PostgreSQL,
through FastAPI's TestClient: an endpoint that enqueues on its request's AsyncSession keeps the
order and its job when it returns, and neither when it raises."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine

from tests.conftest import migrated_postgres_database
from tests.fastapi_project.app import Base, create_app


@pytest.fixture
def database(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh database with the shop's tables and ket's; its URL."""
    monkeypatch.setenv("KET_REGISTRY_URL", f"sqlite:///{tmp_path / 'registry.db'}")

    def shop_tables(url: str) -> None:
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        Base.metadata.create_all(engine)
        engine.dispose()

    with migrated_postgres_database(postgres_url, "ket_fastapi", before_migrate=shop_tables) as url:
        yield url


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as connection:
        return connection.execute(query).fetchall()


def test_an_endpoint_keeps_the_order_and_its_job_when_it_returns_and_neither_when_it_raises(
    database: str,
) -> None:
    with TestClient(create_app(database)) as http:
        created = http.post("/orders", json={"number": "1001"})
        refused = http.post("/orders", json={"number": "1002", "paid": False})
    assert created.status_code == 201, created.text
    assert refused.status_code == 402, refused.text
    order_id = created.json()["id"]
    assert _rows(database, "SELECT id, number FROM orders") == [(order_id, "1001")]
    jobs = _rows(database, "SELECT name, state, payload FROM ket_jobs")
    assert jobs == [("shop.confirm", "available", {"order_id": str(order_id)})]


def test_the_docs_show_this_example_as_it_is_tested() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "jobs.md").read_text()
    example = (Path(__file__).parents[1] / "fastapi_project" / "app.py").read_text()
    body = example[example.index("from collections.abc import AsyncIterator") :]
    section = docs[docs.index("#### From FastAPI") :]
    block = section[section.index("```python\n") + len("```python\n") :]
    assert block.startswith(body), "docs/jobs.md, From FastAPI: copy tests/fastapi_project/app.py"
