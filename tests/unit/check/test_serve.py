"""Serve checks: a valid `serve={...}`, and an authenticator that can take the request."""

from __future__ import annotations

from typing import Any

import pytest

from ket import define_deployment, define_module
from ket.check import run_checks
from ket.declare import DeploymentDecl

from .build import error


def authenticate(request: object) -> None:
    """An authenticator of the right shape."""


def served(serve: Any) -> DeploymentDecl:
    return define_deployment(name="shop", modules=[define_module(name="sales")], serve=serve)


@pytest.mark.parametrize(
    ("serve", "message"),
    [
        ({"authenticate": "tokens"}, "authenticate: Input should be callable, got 'tokens'"),
        ({"max_body_bytes": 0}, "max_body_bytes: Input should be greater than 0, got 0"),
        ({"max_body_bytes": "1MB"}, "max_body_bytes: Input should be a valid integer, got '1MB'"),
        (
            {"shutdown_grace_ms": -1},
            "shutdown_grace_ms: Input should be greater than or equal to 0, got -1",
        ),
        ({"auth": authenticate}, "auth: Extra inputs are not permitted, got "),
        (
            {"tenant_host": "erp.example.com"},
            "tenant_host: must be a lowercase host name with {tenant} standing once in it, e.g. "
            "'{tenant}.erp.example.com', got 'erp.example.com'",
        ),
        (
            {"security_scheme": {"type": "basic"}},
            "security_scheme: must be an OpenAPI security scheme whose type is one of http, "
            "apiKey, oauth2, openIdConnect, mutualTLS, got {'type': 'basic'}",
        ),
    ],
)
def test_invalid_serve_option_is_KET601(serve: dict[str, Any], message: str) -> None:
    deployment = served(serve)
    [found] = run_checks(deployment)
    assert (found.id, found.obj, found.source) == ("KET601", "deployment shop", deployment.source)
    assert found.msg.startswith(message)


def token_and_tenant(request, tenant):  # type: ignore[no-untyped-def]
    """An authenticator that wants two arguments."""


def test_authenticator_that_cannot_take_the_request_is_KET602() -> None:
    deployment = served({"authenticate": token_and_tenant})
    assert run_checks(deployment) == [
        error(
            "KET602",
            "authenticator tests.unit.check.test_serve:token_and_tenant(request, tenant) cannot "
            "be called with (request)",
            obj="deployment shop",
            source=deployment.source,
        )
    ]


def test_valid_serve_configuration_is_silent() -> None:
    deployment = served(
        {
            "authenticate": authenticate,
            "max_body_bytes": 65_536,
            "tenant_host": "{tenant}.erp.example.com",
            "shutdown_grace_ms": 0,
            "security_scheme": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        }
    )
    assert run_checks(deployment) == []


def test_serve_must_be_a_dict() -> None:
    with pytest.raises(Exception, match="serve must be a dict, got 'yes'"):
        served("yes")
