"""A request body as a function's input: numbers reach the function as they were written."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from starlette.testclient import TestClient

from ket import define_deployment, define_function, define_module
from tests.unit.serve.conftest import Serve, auth
from tests.unit.serve.shop import authenticate


class Numbers(BaseModel):
    whole: int | None = None
    label: int | str | None = None
    wholes: list[int] = []
    ratio: float | None = None
    anything: Any = None


def numbers(ctx: Any, input: Numbers) -> dict[str, str]:
    """Each value as Python holds it: `repr` tells 4 from 4.0."""
    return {name: repr(value) for name, value in input}


@pytest.fixture
def client(serve: Serve) -> TestClient:
    module = define_module(
        name="num", functions={"echo": define_function(input=Numbers, handler=numbers)}
    )
    return serve(
        define_deployment(name="num", modules=[module], serve={"authenticate": authenticate})
    )


def test_numbers_reach_the_function_as_written_exactly(client: TestClient) -> None:
    body = (
        b'{"whole": 1e23, "label": 4.0, "wholes": [4.0, 5, 2E2], "ratio": 4.0,'
        b' "anything": [1e23, 4.0, 4]}'
    )
    answer = client.post("/functions/num.echo", content=body, headers=auth("admin"))
    assert answer.json() == {
        "whole": repr(10**23),
        "label": "4",
        "wholes": "[4, 5, 200]",
        "ratio": "4.0",
        "anything": "[1e+23, 4.0, 4]",
    }


def test_a_number_with_a_fraction_for_an_int_field_is_refused_where_it_stands(
    client: TestClient,
) -> None:
    body = b'{"whole": 4.0, "wholes": [4.0, 4.5], "anything": 4.5}'
    answer = client.post("/functions/num.echo", content=body, headers=auth("admin"))
    assert answer.status_code == 422
    assert [(e["loc"], e["type"]) for e in answer.json()["detail"]] == [(["wholes", 1], "int_type")]
