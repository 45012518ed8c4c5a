"""The example app's authenticator, the code people copy: the right token reaches only the
tenants ERP_API_TENANTS names (the default tenant when it is unset; `*` every tenant)."""

from __future__ import annotations

import asyncio

import pytest
from modules_example.auth import authenticate

from ket.serve import AuthRequest, Principal

TOKEN = "s3cret"


def ask(tenant: str, token: str | None = TOKEN) -> Principal | None:
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    request = AuthRequest(tenant=tenant, method="POST", path="/functions/x.y", headers=headers)
    return asyncio.run(authenticate(request))


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERP_API_TOKEN", TOKEN)
    monkeypatch.delenv("ERP_API_TENANTS", raising=False)


def test_unset_the_token_reaches_the_default_tenant_alone() -> None:
    granted = ask("default")
    assert granted is not None and "call:*" in granted.permissions
    assert ask("beta") is None  # another tenant named in X-Ket-Tenant: 401


def test_the_token_reaches_the_tenants_named_and_no_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ERP_API_TENANTS", "alpha, beta")
    assert ask("alpha") is not None and ask("beta") is not None
    assert ask("default") is None and ask("gamma") is None


def test_every_tenant_is_a_choice_made_in_the_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERP_API_TENANTS", "*")
    assert ask("alpha") is not None and ask("t0999") is not None


def test_a_wrong_or_missing_token_reaches_no_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERP_API_TENANTS", "*")
    assert ask("alpha", token="guess") is None
    assert ask("alpha", token=None) is None
    monkeypatch.delenv("ERP_API_TOKEN")
    assert ask("default") is None  # no token set: nobody
