"""ket's pytest plugin: fixtures that give each test a fresh deployment to drive.

Installed with ket (the `pytest11` entry point), it adds fixtures and nothing else:

    def test_confirming_mails_the_customer(ket_e2e):
        ket_e2e.client.call("sales.confirm_order", {"order_id": order_id})
        ket_e2e.assert_enqueued("sales.send_confirmation", {"order_id": order_id})
        assert ket_e2e.drain_jobs() == 1

- `ket_deployment`: the deployment under test: the `ket_deployment` ini option
  (`module:attribute`), else the project's `[tool.ket]`; override it in a conftest to test
  another;
- `ket_database_url`: None (a fresh SQLite file), or with `KET_TEST_POSTGRES_URL` naming a
  server, a database of its own on it, dropped after the test;
- `ket_e2e`: `create_test_deployment(ket_deployment, database_url=ket_database_url)`, closed
  after the test;
- `ket_clock`: `ket_e2e.clock`, the manual clock.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# imported by the fixtures that use them: every pytest run loads this plugin, and a test
# session that never asks for ket's fixtures should not pay for importing ket
if TYPE_CHECKING:
    from ket.declare.deployment import DeploymentDecl
    from ket.store.clock import ManualClock
    from ket.testing.deployment import TestDeployment

POSTGRES_VARIABLE = "KET_TEST_POSTGRES_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "ket_deployment",
        "the deployment ket's fixtures test, as module:attribute (default: [tool.ket] of "
        "pyproject.toml)",
        default=None,
    )


@pytest.fixture
def ket_deployment(pytestconfig: pytest.Config) -> DeploymentDecl:
    """The deployment under test; override this fixture to test another."""
    spec = pytestconfig.getini("ket_deployment")
    if spec:
        return _imported(str(spec))
    from ket.workspace import load_deployment

    return load_deployment(cwd=Path(str(pytestconfig.rootpath)))


@pytest.fixture
def ket_database_url() -> Iterator[str | None]:
    """None (a fresh embedded SQLite database), or with KET_TEST_POSTGRES_URL set, a fresh
    database on that server for this test alone, dropped afterwards."""
    server = os.environ.get(POSTGRES_VARIABLE)
    if not server:
        yield None
        return
    from ket.connection.address import parse_url
    from ket.control.tenant_database import create_database, drop_database

    parsed = parse_url(server)
    if parsed.get_backend_name() != "postgresql":
        raise pytest.UsageError(
            f"{POSTGRES_VARIABLE} must be a postgresql:// URL, got {parsed.get_backend_name()!r}"
        )
    url = parsed.set(database=f"ket_test_{uuid.uuid4().hex[:12]}").render_as_string(
        hide_password=False
    )
    asyncio.run(create_database(url))
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))


@pytest.fixture
def ket_e2e(
    ket_deployment: DeploymentDecl, ket_database_url: str | None
) -> Iterator[TestDeployment]:
    """A test deployment of `ket_deployment` on `ket_database_url`, torn down after the test."""
    from ket.testing.deployment import create_test_deployment

    with create_test_deployment(ket_deployment, database_url=ket_database_url) as e2e:
        yield e2e


@pytest.fixture
def ket_clock(ket_e2e: TestDeployment) -> ManualClock:
    """The manual clock of `ket_e2e`."""
    return ket_e2e.clock


def _imported(spec: str) -> DeploymentDecl:
    from ket.declare.deployment import DeploymentDecl

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise pytest.UsageError(f"ket_deployment must be module:attribute, got {spec!r}")
    value = getattr(importlib.import_module(module_name), attribute, None)
    if not isinstance(value, DeploymentDecl):
        raise pytest.UsageError(
            f"ket_deployment {spec!r} is not a deployment (define_deployment(...)), got "
            f"{type(value).__name__}"
        )
    return value
