"""Serving the shop deployment in-process: `serve` builds the app on tenant databases and returns
a Starlette TestClient (the app's start-up and shutdown run around it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ket.catalog import Catalog
from ket.declare.deployment import DeploymentDecl
from ket.serve.app import create_app
from ket.store.contract import JobStore
from ket.store.sql import SqlStore
from ket.transport import sender_from_url

Serve = Callable[..., TestClient]


def migrate(url: str) -> None:
    async def main() -> None:
        store = await SqlStore.open(url, migrate=True)
        await store.close()

    asyncio.run(main())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    """`serve(deployment, registered=None, template=None)`: the app, on SQLite files in tmp_path
    unless `template` names other databases; `registered` is the registry (a dict that a test
    may change while the app runs)."""
    clients: list[TestClient] = []

    def make(
        deployment: DeploymentDecl,
        registered: dict[str, str | None] | None = None,
        template: str | None = None,
        **options: Any,
    ) -> TestClient:
        registry = registered if registered is not None else {}
        template = template or f"sqlite:///{tmp_path}/{{tenant}}.db"
        for tenant in registry or {"default": None}:
            if template.startswith("sqlite"):
                migrate(template.replace("{tenant}", tenant))

        async def list_tenants() -> dict[str, str | None]:
            return dict(registry)

        async def open_store(url: str) -> JobStore:
            return await SqlStore.open(url)

        app = create_app(
            Catalog.build(deployment),
            list_tenants=list_tenants,
            template=template,
            open_store=open_store,
            sender=sender_from_url("capture:"),
            **options,
        )
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def auth(token: str, **headers: str) -> dict[str, str]:
    """Headers of a JSON call with a bearer token (and any others, `_` for `-`)."""
    return {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        **{name.replace("_", "-"): value for name, value in headers.items()},
    }
