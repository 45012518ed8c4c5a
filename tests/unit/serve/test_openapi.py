"""/openapi.json: built from the functions' input models, and the server keeps to it (tested
with schemathesis against the app in-process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import settings
from schemathesis import Case

from ket import define_deployment
from ket.catalog import Catalog
from ket.serve.app import create_app
from ket.serve.openapi import openapi_document
from ket.store.contract import JobStore
from ket.store.sql import SqlStore
from ket.transport import sender_from_url
from tests.unit.serve.conftest import Serve, auth, migrate
from tests.unit.serve.shop import api, authenticate, deployment

TOKEN = {"Authorization": "Bearer admin"}


def test_the_document_has_one_operation_per_function_with_its_input_schema(
    serve: Serve,
) -> None:
    answer = serve(deployment()).get("/openapi.json", headers=auth("admin"))
    assert answer.status_code == 200
    document = answer.json()
    assert document["openapi"] == "3.1.0"
    assert sorted(document["paths"]) == sorted(
        f"/functions/shop.{name}"
        for name in (
            "echo",
            "where",
            "add_note",
            "notes",
            "all_notes",
            "pay",
            "nap",
            "block",
            "nan",
        )
    )
    echo = document["paths"]["/functions/shop.echo"]["post"]
    ref = echo["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert schema["required"] == ["text"] and schema["additionalProperties"] is False
    assert {"200", "401", "403", "404", "413", "422"} <= set(echo["responses"])
    assert document["components"]["securitySchemes"] == {
        "ket": {"type": "http", "scheme": "bearer"}
    }
    assert document["security"] == [{"ket": []}]


def test_the_document_is_for_authenticated_callers_only(serve: Serve) -> None:
    assert serve(deployment()).get("/openapi.json").status_code == 401


def test_the_version_changes_when_a_function_does() -> None:
    before = openapi_document(Catalog.build(deployment()))
    again = openapi_document(Catalog.build(deployment()))
    other = openapi_document(Catalog.build(deployment(max_body_bytes=5)))
    changed = openapi_document(
        Catalog.build(
            define_deployment(name="shop", modules=[api], serve={"authenticate": authenticate})
        )
    )
    assert before["info"]["version"] == again["info"]["version"] == other["info"]["version"]
    assert changed["info"]["version"] != before["info"]["version"]


@pytest.fixture
def api_schema(tmp_path: Path) -> Any:
    template = f"sqlite:///{tmp_path}/{{tenant}}.db"
    migrate(template.replace("{tenant}", "default"))

    async def list_tenants() -> dict[str, str | None]:
        return {}

    async def open_store(url: str) -> JobStore:
        return await SqlStore.open(url)

    served = define_deployment(name="api", modules=[api], serve={"authenticate": authenticate})
    app = create_app(
        Catalog.build(served),
        list_tenants=list_tenants,
        template=template,
        open_store=open_store,
        sender=sender_from_url("capture:"),
    )
    return schemathesis.openapi.from_asgi("/openapi.json", app, headers=TOKEN)


schema = schemathesis.pytest.from_fixture("api_schema")


# Each operation gets schemathesis's coverage phase (its boundary and negative cases: 31 to 86 per
# operation here) and then random cases: 50 of them, not hypothesis's default 100, for these four
# small inputs; the random half cost most of the test's time.
@schema.parametrize()
@settings(max_examples=50)
def test_the_server_keeps_to_its_document(case: Case[Any]) -> None:
    case.call_and_validate(headers=TOKEN)
