"""Which tenant a request is for: the X-Ket-Tenant header or the host, checked against the
registry; single-tenant apps need neither."""

from __future__ import annotations

import time

from starlette.applications import Starlette

from tests.unit.serve.conftest import Serve, auth, migrate
from tests.unit.serve.shop import deployment

WHERE = "/functions/shop.where"
TWO = {"acme": None, "globex": None}


def test_the_header_chooses_the_tenant_the_function_runs_for(serve: Serve) -> None:
    client = serve(deployment(), registered=dict(TWO))
    for tenant in ("acme", "globex"):
        answer = client.post(WHERE, json={}, headers=auth("admin", x_ket_tenant=tenant))
        assert answer.json() == {"tenant": tenant, "company": "north"}


def test_a_multi_tenant_server_refuses_a_request_that_names_no_tenant(serve: Serve) -> None:
    answer = serve(deployment(), registered=dict(TWO)).post(WHERE, json={}, headers=auth("admin"))
    assert (answer.status_code, answer.json()["error"]) == (400, "tenant_required")
    assert "X-Ket-Tenant" in answer.json()["message"]


def test_an_unregistered_tenant_is_refused_with_404(serve: Serve) -> None:
    client = serve(deployment(), registered=dict(TWO))
    answer = client.post(WHERE, json={}, headers=auth("admin", x_ket_tenant="initech"))
    assert (answer.status_code, answer.json()["error"]) == (404, "unknown_tenant")


def test_a_name_outside_the_tenant_grammar_is_refused_with_400(serve: Serve) -> None:
    client = serve(deployment(), registered=dict(TWO))
    for name in ("../acme", "ACME", "registry"):
        answer = client.post(WHERE, json={}, headers=auth("admin", x_ket_tenant=name))
        assert (answer.status_code, answer.json()["error"]) == (400, "bad_tenant"), name


def test_a_single_tenant_app_needs_no_header_and_refuses_another_name(serve: Serve) -> None:
    client = serve(deployment())
    assert client.post(WHERE, json={}, headers=auth("admin")).json()["tenant"] == "default"
    named = client.post(WHERE, json={}, headers=auth("admin", x_ket_tenant="default"))
    assert named.json()["tenant"] == "default"
    other = client.post(WHERE, json={}, headers=auth("admin", x_ket_tenant="acme"))
    assert other.status_code == 404


def test_the_host_names_the_tenant_when_a_host_template_is_declared(serve: Serve) -> None:
    client = serve(deployment(tenant_host="{tenant}.erp.example.com"), registered=dict(TWO))
    answer = client.post(WHERE, json={}, headers=auth("admin", host="globex.erp.example.com:8000"))
    assert answer.json()["tenant"] == "globex"
    clash = client.post(
        WHERE, json={}, headers=auth("admin", host="globex.erp.example.com", x_ket_tenant="acme")
    )
    assert (clash.status_code, clash.json()["error"]) == (400, "tenant_mismatch")
    unknown = client.post(WHERE, json={}, headers=auth("admin", host="initech.erp.example.com"))
    assert unknown.status_code == 404


def test_a_tenant_registered_while_the_server_runs_is_served_at_once(serve: Serve) -> None:
    registry = {"acme": None}
    client = serve(deployment(), registered=registry)
    headers = auth("admin", x_ket_tenant="globex")
    assert client.post(WHERE, json={}, headers=headers).status_code == 404
    registry["globex"] = None
    app = client.app
    assert isinstance(app, Starlette)  # as create_app makes it
    migrate(app.state.ket.tenants.tenancy.urls["acme"].replace("acme", "globex"))
    time.sleep(1.1)  # a name the list lacks reads the registry again, at most once a second
    assert client.post(WHERE, json={}, headers=headers).json()["tenant"] == "globex"


def test_the_authenticator_decides_per_tenant(serve: Serve) -> None:
    client = serve(deployment(), registered=dict(TWO))
    ok = client.post(WHERE, json={}, headers=auth("acme-only", x_ket_tenant="acme"))
    assert ok.status_code == 200
    refused = client.post(WHERE, json={}, headers=auth("acme-only", x_ket_tenant="globex"))
    assert refused.status_code == 401
