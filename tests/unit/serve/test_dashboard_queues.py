"""Pausing and resuming a queue from the dashboard's Queues page: shown to whoever holds
`queues:write` only, refused to anyone else however it is posted, guarded as every action is,
and recorded in the audit log with the principal's subject."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from starlette.testclient import TestClient

from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, audit, deployment, pause, pauses, send_job

D = "/dashboard/t/default"
OPS = {"Authorization": "Bearer ops"}


def _csrf(client: TestClient, headers: dict[str, str]) -> str:
    page = client.get(f"{D}/queues", headers=headers)
    assert page.status_code == 200, page.text
    return page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def _row(page: str, queue: str) -> str:
    """The table row of `queue` on the Queues page."""
    start = page.index(f'<td><a href="{D}/jobs?queue={queue}">{queue}</a></td>')
    return page[page.rindex("<tr", 0, start) : page.index("</tr>", start)]


def test_an_operator_pauses_and_resumes_a_queue_and_the_audit_log_names_them(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job()])
    page = client.get(f"{D}/queues", headers=OPS).text
    assert "Paused in tenant" not in page
    assert '<span class="state state-active">active</span>' in _row(page, "mail")
    assert f'action="{D}/queues/mail/pause"' in page and "/resume" not in page
    token = _csrf(client, OPS)

    done = client.post(
        f"{D}/queues/mail/pause", data={"csrf": token}, headers=OPS, follow_redirects=False
    )
    assert (done.status_code, done.headers["location"]) == (303, f"{D}/queues?notice=paused")
    assert pauses(url) == {"mail": "otto"}
    page = client.get(done.headers["location"], headers=OPS).text
    assert "Paused: no worker claims the queue&#39;s jobs until it is resumed" in page
    row = _row(page, "mail")
    assert row.startswith('<tr class="paused">')
    assert '<span class="state state-paused">paused</span> by otto since 20' in row
    assert f'action="{D}/queues/mail/resume"' in row
    assert "<strong>Paused in tenant default:</strong>" in page
    assert '<span class="state state-active">active</span>' in _row(page, "default")

    again = client.post(f"{D}/queues/mail/pause", data={"csrf": token}, headers=OPS)
    assert "Nothing changed: the queue was already paused." in again.text
    client.post(f"{D}/queues/mail/resume", data={"csrf": token}, headers=OPS)
    assert pauses(url) == {}
    entries = [(e.subject, e.source, e.action, dict(e.selection), e.changed) for e in audit(url)]
    assert entries == [
        ("otto", "dashboard", "resume", {"queue": "mail"}, 1),
        ("otto", "dashboard", "pause", {"queue": "mail"}, 0),
        ("otto", "dashboard", "pause", {"queue": "mail"}, 1),
    ]
    log = client.get(f"{D}/audit", headers=OPS).text
    assert log.count(f'<a href="{D}/queues">queue mail</a>') == 3


def test_without_queues_write_there_is_no_button_and_a_forged_post_is_refused(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    pause(url, "default", by="otto")
    for token in ("reader", "admin"):  # jobs:write retries and cancels, and pauses nothing
        headers = {"Authorization": f"Bearer {token}"}
        page = client.get(f"{D}/queues", headers=headers).text
        assert "paused</span> by otto" in page  # what is paused is shown to every reader
        assert "/pause" not in page and "/resume" not in page, token
        own = _csrf(client, headers)  # a good token of the principal's own page
        for action in ("mail/pause", "default/resume"):
            refused = client.post(f"{D}/queues/{action}", data={"csrf": own}, headers=headers)
            assert refused.status_code == 403, (token, action)
            assert "does not hold the queues:write permission" in refused.text
    assert pauses(url) == {"default": "otto"}
    assert audit(url) == []
    anonymous = client.post(f"{D}/queues/mail/pause", data={"csrf": "x"})
    assert anonymous.status_code == 401
    assert pauses(url) == {"default": "otto"}


def test_a_pause_is_guarded_as_every_action_is(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    action = f"{D}/queues/mail/pause"
    reader = _csrf(client, {"Authorization": "Bearer reader"})  # another subject's
    for data in ({"x": "1"}, {"csrf": "1.deadbeef"}, {"csrf": reader}):
        answer = client.post(action, data=data, headers=OPS)
        assert (answer.status_code, "security token" in answer.text) == (403, True), data
    token = _csrf(client, OPS)
    for cross in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        answer = client.post(action, data={"csrf": token}, headers={**OPS, **cross})
        assert answer.status_code == 403 and "another site" in answer.text
    assert client.get(action, headers=OPS).status_code == 404  # no page: a GET changes nothing
    assert pauses(url) == {}


def test_a_queue_the_deployment_does_not_declare_is_refused_unless_it_is_paused(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    token = _csrf(client, OPS)
    typo = client.post(f"{D}/queues/mial/pause", data={"csrf": token}, headers=OPS)
    assert typo.status_code == 404
    assert (
        "no queue &#39;mial&#39; in deployment &#39;desk&#39; (queues: default, mail)" in typo.text
    )
    assert pauses(url) == {}
    # a pause an older deployment left is listed, and can be lifted
    pause(url, "retired", by="otto")
    page = client.get(f"{D}/queues", headers=OPS).text
    row = _row(page, "retired")
    assert "not declared" in row and f'action="{D}/queues/retired/resume"' in row
    lifted = client.post(f"{D}/queues/retired/resume", data={"csrf": token}, headers=OPS)
    assert lifted.status_code == 200 and "Resumed" in lifted.text
    assert pauses(url) == {}
    assert "retired" not in client.get(f"{D}/queues", headers=OPS).text
    again = client.post(f"{D}/queues/retired/pause", data={"csrf": token}, headers=OPS)
    assert again.status_code == 404


def test_a_pause_in_one_tenant_never_touches_another(serve: Serve, tmp_path: Path) -> None:
    acme, globex = (f"sqlite:///{tmp_path}/{t}.db" for t in ("acme", "globex"))
    client = serve(deployment(), registered={"acme": None, "globex": None})
    page = client.get("/dashboard/t/acme/queues", headers=OPS).text
    token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    client.post("/dashboard/t/acme/queues/mail/pause", data={"csrf": token}, headers=OPS)
    assert (pauses(acme), pauses(globex)) == ({"mail": "otto"}, {})
    # acme's form token is no good in globex
    wrong = client.post("/dashboard/t/globex/queues/mail/pause", data={"csrf": token}, headers=OPS)
    assert wrong.status_code == 403
    assert pauses(globex) == {} and audit(globex) == []


def test_a_database_older_than_the_pauses_shows_the_queues_and_says_to_migrate(
    serve: Serve, tmp_path: Path
) -> None:
    client = serve(deployment())
    with sqlite3.connect(tmp_path / "default.db") as connection:
        connection.execute("DROP TABLE ket_queue_pauses")
    page = client.get(f"{D}/queues", headers=OPS)
    assert page.status_code == 200
    assert "cannot read which queues are paused" in page.text and "run `ket migrate`" in page.text
    assert "/pause" not in page.text  # no button that could only fail
    assert '<td class="queue-state">unknown</td>' in _row(page.text, "mail")  # not "active"
