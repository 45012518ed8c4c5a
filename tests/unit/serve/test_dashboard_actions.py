"""Retry and cancel from the dashboard: a CSRF token on every one, an audit entry with who did
it, and nothing outside the tenant the page is for."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from ket.serve import AuthRequest, Principal
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, audit, authenticate, deployment, send_job, states

D = "/dashboard"
ADMIN = {"Authorization": "Bearer admin"}
TWO = {"acme": None, "globex": None}


def _csrf(client: TestClient, path: str, headers: dict[str, str]) -> str:
    page = client.get(path, headers=headers)
    assert page.status_code == 200, page.text
    return page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_a_retry_needs_the_csrf_token_of_its_page(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    [job] = arrange(url, [send_job()], discard=1)
    page = f"{D}/t/default/jobs/{job}"
    action = f"{page}/retry"
    for data in ({"x": "1"}, {"csrf": ""}, {"csrf": "123.abc"}, {"csrf": "1.deadbeef"}):
        answer = client.post(action, data=data, headers=ADMIN)
        assert (answer.status_code, "security token" in answer.text) == (403, True), data
    reader_token = _csrf(client, page, {"Authorization": "Bearer reader"})
    assert client.post(action, data={"csrf": reader_token}, headers=ADMIN).status_code == 403
    token = _csrf(client, page, ADMIN)
    for cross in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        answer = client.post(action, data={"csrf": token}, headers={**ADMIN, **cross})
        assert answer.status_code == 403 and "another site" in answer.text
    json_body = client.post(action, json={"csrf": token}, headers=ADMIN)
    assert json_body.status_code == 415
    assert states(url) == {job: "discarded"}
    done = client.post(action, data={"csrf": token}, headers=ADMIN, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, f"{page}?notice=retried")
    assert states(url) == {job: "available"}
    shown = client.get(done.headers["location"], headers=ADMIN).text
    assert "Retried: the job is available now." in shown


def test_retry_and_cancel_leave_audit_entries_naming_the_principal(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    discarded, waiting = arrange(url, [send_job(), send_job()], discard=1)
    base = f"{D}/t/default/jobs"
    token = _csrf(client, f"{base}/{discarded}", ADMIN)
    client.post(f"{base}/{discarded}/retry", data={"csrf": token}, headers=ADMIN)
    refused = client.post(f"{base}/{discarded}/retry", data={"csrf": token}, headers=ADMIN)
    assert refused.status_code == 409
    assert "Nothing changed: only retryable or discarded jobs can be retried" in refused.text
    client.post(f"{base}/{waiting}/cancel", data={"csrf": token}, headers=ADMIN)
    assert states(url) == {discarded: "available", waiting: "cancelled"}
    entries = [(e.subject, e.source, e.action, e.job_id, e.changed) for e in audit(url)]
    assert entries == [
        ("ada", "dashboard", "cancel", waiting, 1),
        ("ada", "dashboard", "retry", discarded, 0),
        ("ada", "dashboard", "retry", discarded, 1),
    ]
    log = client.get(f"{D}/t/default/audit", headers=ADMIN).text
    assert log.count("<td>ada</td>") == 3


def test_cancel_by_filter_confirms_the_count_and_acts_on_the_jobs_counted_only(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    mail = arrange(url, [send_job() for _ in range(4)])
    confirm = client.get(f"{D}/t/default/bulk/cancel?queue=mail&state=available", headers=ADMIN)
    assert "Cancel 4 jobs in tenant default?" in confirm.text
    token = confirm.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    late = arrange(url, [send_job()])  # after the question: never touched
    done = client.post(
        f"{D}/t/default/bulk/cancel",
        data={
            "csrf": token,
            "queue": "mail",
            "state": "available",
            "through_id": "4",
            "count": "4",
        },
        headers=ADMIN,
        follow_redirects=False,
    )
    assert done.status_code == 303
    assert "notice=cancel" in done.headers["location"] and "changed=4" in done.headers["location"]
    assert states(url) == {**{i: "cancelled" for i in mail}, late[0]: "available"}
    [entry] = audit(url)
    assert (entry.action, entry.matched, entry.changed, entry.job_id) == ("cancel", 4, 4, None)
    assert entry.selection == {"states": ["available"], "queues": ["mail"], "through_id": 4}
    shown = client.get(done.headers["location"], headers=ADMIN).text
    assert "Cancelled 4 jobs; 0 left as they were." in shown


def test_an_action_in_one_tenant_never_touches_another(serve: Serve, tmp_path: Path) -> None:
    acme, globex = (f"sqlite:///{tmp_path}/{t}.db" for t in TWO)
    client = serve(deployment(), registered=dict(TWO))
    [a] = arrange(acme, [send_job()], discard=1)
    [g] = arrange(globex, [send_job()], discard=1)
    assert a == g == 1  # the same id in both tenants
    token = _csrf(client, f"{D}/t/acme/jobs/1", ADMIN)
    retried = client.post(f"{D}/t/acme/jobs/1/retry", data={"csrf": token}, headers=ADMIN)
    assert retried.status_code == 200  # followed to the job's page
    confirm = client.get(f"{D}/t/acme/bulk/cancel", headers=ADMIN)
    assert "Cancel 1 job in tenant acme?" in confirm.text
    client.post(
        f"{D}/t/acme/bulk/cancel",
        data={"csrf": token, "through_id": "1", "count": "1"},
        headers=ADMIN,
    )
    assert states(acme) == {1: "cancelled"}
    assert states(globex) == {1: "discarded"}
    assert audit(globex) == []
    assert len(audit(acme)) == 2
    # acme's token is no good in globex, and the path's tenant must agree with the header's
    wrong_tenant = client.post(f"{D}/t/globex/jobs/1/retry", data={"csrf": token}, headers=ADMIN)
    assert wrong_tenant.status_code == 403
    mismatch = client.get(f"{D}/t/globex/jobs", headers={**ADMIN, "X-Ket-Tenant": "acme"})
    assert mismatch.status_code == 400
    acme_only = {"Authorization": "Bearer acme-admin"}
    assert client.get(f"{D}/t/acme/jobs", headers=acme_only).status_code == 200
    assert client.get(f"{D}/t/globex/jobs", headers=acme_only).status_code == 401
    assert states(globex) == {1: "discarded"}


def test_with_several_tenants_the_dashboard_asks_which_and_asks_the_authenticator_nothing(
    serve: Serve,
) -> None:
    # asking the authenticator about every tenant served made each anonymous request to this
    # page one call of it per tenant (and one logged traceback each, for a cookie that makes
    # it raise)
    asked: list[str] = []

    async def counting(request: AuthRequest) -> Principal | None:
        asked.append(request.tenant)
        return await authenticate(request)

    client = serve(deployment(authenticate=counting), registered=dict(TWO))
    page = client.get(f"{D}/", headers=ADMIN)
    assert page.status_code == 401  # signing in is per tenant: the form asks for the tenant
    assert 'action="/dashboard/signin"' in page.text and 'name="tenant"' in page.text
    assert "acme" not in page.text and "globex" not in page.text  # no tenant is named
    assert asked == []
    chosen = client.get(f"{D}/?tenant=acme", headers=ADMIN, follow_redirects=False)
    assert (chosen.status_code, chosen.headers["location"]) == (303, f"{D}/t/acme/jobs")
    assert asked == []
    assert client.get(chosen.headers["location"], headers=ADMIN).status_code == 200
    assert asked == ["acme"]  # the one named, once it is asked for
    bad = client.get(f"{D}/?tenant=Not A Tenant", headers=ADMIN, follow_redirects=False)
    assert bad.status_code == 400 and "tenant name &#39;Not A Tenant&#39; must match" in bad.text
