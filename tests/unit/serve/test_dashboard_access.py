"""The dashboard fails closed: every path under it, static files included, is refused without
an authenticator, without credentials and without `jobs:read`; reading and writing are separate
permissions; and its answers carry a strict Content-Security-Policy."""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import ket.serve.dashboard
from ket.serve.throttle import FREE_FAILURES
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, audit, deployment, send_job, states

D = "/dashboard"
T = f"{D}/t/default"
READS = [
    f"{D}/",
    f"{T}",
    f"{T}/jobs",
    f"{T}/jobs?state=discarded",
    f"{T}/jobs/1",
    f"{T}/queues",
    f"{T}/schedules",
    f"{T}/workers",
    f"{T}/audit",
    f"{T}/bulk/retry",
    f"{T}/bulk/cancel?queue=mail",
    f"{T}/static/dashboard.css",
    f"{T}/static/dashboard.js",
    f"{T}/no-such-page",
    f"{D}/no-such-page",
]
WRITES = [
    f"{T}/jobs/1/retry",
    f"{T}/jobs/1/cancel",
    f"{T}/bulk/retry",
    f"{T}/bulk/cancel",
    f"{T}/queues/mail/pause",
    f"{T}/queues/mail/resume",
    f"{T}/schedules/desk.tick/pause",
    f"{T}/schedules/desk.tick/resume",
    f"{T}/schedules/desk.tick/run",
    f"{T}/signout",
    f"{D}/signin",
]
# the one inline style allowed: the dashboard's stylesheet, in the pages before a sign-in
STYLESHEET = (Path(ket.serve.dashboard.__file__).parent / "static" / "dashboard.css").read_bytes()
DIGEST = base64.b64encode(hashlib.sha256(STYLESHEET).digest()).decode()
CSP = (
    f"default-src 'none'; script-src 'self'; style-src 'self' 'sha256-{DIGEST}'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'"
)


def refusals(client: TestClient, headers: dict[str, str]) -> dict[str, int]:
    """Status of every page and action, GET and POST as each takes."""
    found = {}
    for path in READS:
        answer = client.get(path, headers=headers, follow_redirects=False)
        assert answer.headers["content-security-policy"] == CSP, path
        found[f"GET {path}"] = answer.status_code
    for path in WRITES:
        answer = client.post(
            path, data={"token": headers.get("x-token", ""), "csrf": "1.x"}, headers=headers
        )
        found[f"POST {path}"] = answer.status_code
    return found


def test_without_an_authenticator_every_route_of_the_dashboard_is_refused(
    serve: Serve, tmp_path: Path
) -> None:
    client = serve(deployment(authenticate=None))
    arrange(f"sqlite:///{tmp_path}/default.db", [send_job()])
    for headers in ({}, {"Authorization": "Bearer admin", "x-token": "admin"}):
        found = refusals(client, headers)
        assert set(found.values()) == {401}, found


def test_without_credentials_every_route_is_refused_and_pages_offer_the_sign_in(
    serve: Serve,
) -> None:
    client = serve(deployment())
    found = refusals(client, {"Authorization": "Bearer wrong", "x-token": "wrong"})
    # each a refusal: 401, until the client has guessed too often, then 429 (serve/throttle.py)
    statuses = list(found.values())
    assert set(statuses) == {401, 429}, found
    assert statuses[: FREE_FAILURES + 1] == [401] * (FREE_FAILURES + 1), found
    page = client.get(f"{T}/jobs")
    assert page.status_code == 401
    assert '<form method="post" action="/dashboard/signin"' in page.text
    assert client.get(f"{T}/static/dashboard.css").text.startswith("<!doctype html>")


def test_a_client_that_guessed_too_often_waits_even_with_the_right_token(serve: Serve) -> None:
    client = serve(deployment())
    for guess in range(FREE_FAILURES + 1):
        signed = client.post(f"{D}/signin", data={"token": f"guess{guess}"})
        assert signed.status_code == 401
    refused = client.post(f"{D}/signin", data={"token": "admin"}, follow_redirects=False)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert "too many failed authentications" in refused.text
    # a page opened without credentials is no guess: it is answered, with the sign-in form
    page = client.get(f"{T}/jobs")
    assert page.status_code == 401 and "/dashboard/signin" in page.text
    time.sleep(1.1)
    signed = client.post(f"{D}/signin", data={"token": "admin"}, follow_redirects=False)
    assert signed.status_code == 303


def test_a_principal_without_jobs_read_is_forbidden_everywhere(serve: Serve) -> None:
    client = serve(deployment())
    found = refusals(client, {"Authorization": "Bearer caller", "x-token": "caller"})
    assert set(found.values()) == {403}, found


def test_a_read_only_principal_sees_jobs_but_cannot_retry_or_cancel(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    [job] = arrange(url, [send_job()], discard=1)
    reader = {"Authorization": "Bearer reader"}
    page = client.get(f"{T}/jobs/{job}", headers=reader)
    assert page.status_code == 200
    assert "Retry now" not in page.text and "(read only)" in page.text
    csrf = _csrf(page.text)
    for path in (f"{T}/jobs/{job}/retry", f"{T}/bulk/retry"):
        answer = client.post(path, data={"csrf": csrf}, headers=reader)
        assert answer.status_code == 403, path
        assert "does not hold the jobs:write permission" in answer.text
    assert client.get(f"{T}/bulk/retry", headers=reader).status_code == 403
    assert states(url) == {job: "discarded"}
    assert audit(url) == []


def test_the_sign_in_form_opens_a_session_named_in_a_strict_http_only_cookie(
    serve: Serve,
) -> None:
    client = serve(deployment())
    refused = client.post(f"{D}/signin", data={"token": "wrong"})
    assert refused.status_code == 401 and "That token was not accepted." in refused.text
    assert "set-cookie" not in refused.headers
    forbidden = client.post(f"{D}/signin", data={"token": "caller"})
    assert forbidden.status_code == 403
    signed = client.post(
        f"{D}/signin",
        data={"token": "reader", "next": f"{T}/queues"},
        follow_redirects=False,
    )
    assert (signed.status_code, signed.headers["location"]) == (303, f"{T}/queues")
    cookie = signed.headers["set-cookie"]
    # the session's name, signed, never the token
    assert cookie.startswith("ket_dashboard=v1.default.") and "reader" not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/dashboard" in cookie
    assert "Max-Age=28800" in cookie  # 8 hours
    assert client.get(f"{T}/queues").status_code == 200  # the cookie, sent back
    # a sign-in never sends anyone off the dashboard
    away = client.post(
        f"{D}/signin", data={"token": "reader", "next": "//evil.example/x"}, follow_redirects=False
    )
    assert away.headers["location"] == f"{T}/jobs"


def test_a_session_cookie_is_no_token_and_admits_only_as_this_server_made_it(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_DASHBOARD_KEY", "the replicas' key")
    client = serve(deployment())
    client.post(f"{D}/signin", data={"token": "admin"})
    value = client.cookies["ket_dashboard"]
    # the cookie's value is no bearer token: not for /functions/, not for the dashboard
    bearer = {"Authorization": f"Bearer {value}"}
    assert client.post("/functions/desk.send", json={}, headers=bearer).status_code == 401
    stranger = serve(deployment())  # another server on the same database, with the same key
    assert stranger.get(f"{T}/jobs", headers=bearer).status_code == 401
    # altered, or named for another tenant: no session
    version, tenant, expires, secret, mac = value.split(".")
    flipped = "B" if secret.endswith("A") else "A"  # its last character changed, whatever it was
    for forged in (
        f"{version}.{tenant}.{int(expires) + 3600}.{secret}.{mac}",
        f"{version}.{tenant}.{expires}.{secret[:-1]}{flipped}.{mac}",
        f"{version}.acme.{expires}.{secret}.{mac}",
        "reader",
    ):
        stranger.cookies.set("ket_dashboard", forged, path="/dashboard")
        assert stranger.get(f"{T}/jobs").status_code == 401, forged
    stranger.cookies.set("ket_dashboard", value, path="/dashboard")
    assert stranger.get(f"{T}/jobs").status_code == 200  # a copy admits, until sign-out
    monkeypatch.setenv("KET_DASHBOARD_KEY", "another key")
    other = serve(deployment())
    other.cookies.set("ket_dashboard", value, path="/dashboard")
    assert other.get(f"{T}/jobs").status_code == 401  # a server with another key: no session


def test_signing_out_ends_the_session_for_every_copy_of_its_cookie(
    serve: Serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KET_DASHBOARD_KEY", "the replicas' key")
    client = serve(deployment())
    client.post(f"{D}/signin", data={"token": "admin"})
    copied = client.cookies["ket_dashboard"]
    page = client.get(f"{T}/jobs")
    csrf = _csrf(page.text)
    assert client.post(f"{T}/signout", data={"x": "1"}).status_code == 403  # no CSRF token
    done = client.post(f"{T}/signout", data={"csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303
    assert 'ket_dashboard=""' in done.headers["set-cookie"]
    assert client.get(f"{T}/jobs").status_code == 401
    # the copy taken before is refused too, by every server, and the page's CSRF token is of
    # no use with it
    thief = serve(deployment())
    thief.cookies.set("ket_dashboard", copied, path="/dashboard")
    assert thief.get(f"{T}/jobs").status_code == 401
    retried = thief.post(f"{T}/jobs/1/retry", data={"csrf": csrf})
    assert retried.status_code == 401
    # a new session of the same principal does not take the old session's CSRF tokens
    client.post(f"{D}/signin", data={"token": "admin"})
    assert client.post(f"{T}/signout", data={"csrf": csrf}).status_code == 403


def test_static_files_are_the_package_s_and_cached_only_when_fingerprinted(
    serve: Serve,
) -> None:
    client = serve(deployment())
    reader = {"Authorization": "Bearer reader"}
    page = client.get(f"{T}/jobs", headers=reader).text
    [css] = [part.split('"')[0] for part in page.split('href="')[1:] if ".css?v=" in part]
    answer = client.get(css, headers=reader)
    assert answer.headers["content-type"].startswith("text/css")
    assert "immutable" in answer.headers["cache-control"]
    plain = client.get(f"{T}/static/dashboard.css", headers=reader)
    assert plain.headers["cache-control"] == "no-cache"
    assert client.get(f"{T}/static/secrets.txt", headers=reader).status_code == 404


@pytest.mark.parametrize(
    "query",
    ["state=finished", "queue=nope", "job=desk.nope", "size=7", "page=0", "page=x", "state=%00"],
)
def test_filters_and_paging_come_from_allowlists(serve: Serve, query: str) -> None:
    client = serve(deployment())
    answer = client.get(f"{T}/jobs?{query}", headers={"Authorization": "Bearer reader"})
    assert answer.status_code == 400
    assert answer.headers["content-security-policy"] == CSP


def test_no_page_changes_anything_on_get(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    [job] = arrange(url, [send_job()], discard=1)
    admin = {"Authorization": "Bearer admin"}
    assert client.get(f"{T}/jobs/{job}/retry", headers=admin).status_code == 404  # POST only
    confirm = client.get(f"{T}/bulk/retry?state=discarded", headers=admin)
    assert confirm.status_code == 200 and "Retry 1 job in tenant default?" in confirm.text
    assert states(url) == {job: "discarded"}
    assert audit(url) == []


def test_a_deployment_can_turn_the_dashboard_off(serve: Serve) -> None:
    client = serve(deployment(dashboard=None))
    answer = client.get(f"{T}/jobs", headers={"Authorization": "Bearer admin"})
    assert (answer.status_code, answer.json()["error"]) == (404, "not_found")


def _csrf(page: str) -> str:
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
