"""The operator API of `ket serve`: a tenant's queues as JSON, and their pause and resume,
admitted by the gate as a function call is, and recorded in the audit log as the principal's
through `api`."""

from __future__ import annotations

from pathlib import Path

from tests.unit.serve.conftest import Serve, auth
from tests.unit.serve.desk import arrange, audit, deployment, pause, pauses, send_job

Q = "/operator/queues"


def test_the_queues_are_listed_with_their_state_and_counts(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job(), send_job()], discard=1)
    pause(url, "mail", by="otto")
    answer = client.get(Q, headers=auth("reader"))
    assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
    default, mail = answer.json()["queues"]
    assert default == {
        "queue": "default",
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "available": 0,
        "scheduled": 0,
        "executing": 0,
        "retryable": 0,
        "oldest_available_seconds": None,
    }
    assert (mail["queue"], mail["paused"], mail["paused_by"]) == ("mail", True, "otto")
    assert mail["paused_at"].startswith("20") and mail["available"] == 1


def test_a_pause_and_a_resume_are_recorded_as_the_principals_through_the_api(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    paused = client.post(f"{Q}/mail/pause", headers=auth("pauser"))
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"queue": "mail", "paused": True, "changed": True}
    assert pauses(url) == {"mail": "paula"}
    again = client.post(f"{Q}/mail/pause", headers=auth("pauser"), content="{}")
    assert again.json() == {"queue": "mail", "paused": True, "changed": False}
    listed = client.get(Q, headers=auth("reader")).json()["queues"]
    assert [(q["queue"], q["paused_by"]) for q in listed] == [("default", None), ("mail", "paula")]
    resumed = client.post(f"{Q}/mail/resume", headers=auth("pauser"))
    assert resumed.json() == {"queue": "mail", "paused": False, "changed": True}
    assert pauses(url) == {}
    entries = [(e.subject, e.source, e.action, dict(e.selection), e.changed) for e in audit(url)]
    assert entries == [
        ("paula", "api", "resume", {"queue": "mail"}, 1),
        ("paula", "api", "pause", {"queue": "mail"}, 0),
        ("paula", "api", "pause", {"queue": "mail"}, 1),
    ]


def test_an_unknown_queue_is_404_naming_the_declared_ones(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    for action in ("pause", "resume"):
        answer = client.post(f"{Q}/mial/{action}", headers=auth("pauser"))
        assert answer.status_code == 404
        assert answer.json() == {
            "error": "unknown_queue",
            "message": "no queue 'mial' in deployment 'desk' (queues: default, mail); "
            "did you mean 'mail'?",
        }
    assert pauses(url) == {} and audit(url) == []
    # a pause an older deployment left can be lifted, not made again
    pause(url, "retired")
    assert client.post(f"{Q}/retired/resume", headers=auth("pauser")).json()["changed"] is True
    assert client.post(f"{Q}/retired/pause", headers=auth("pauser")).status_code == 404


def test_nobody_unauthenticated_or_without_the_permission_is_served(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    for method, path in (("GET", Q), ("POST", f"{Q}/mail/pause"), ("POST", f"{Q}/mail/resume")):
        anonymous = client.request(method, path, headers={"Content-Type": "application/json"})
        assert anonymous.status_code == 401, path
        assert anonymous.json()["error"] == "unauthenticated"
        assert anonymous.headers["www-authenticate"] == 'Bearer realm="ket"'
        wrong = client.request(method, path, headers=auth("no-such-token"))
        assert wrong.status_code == 401, path
    assert client.get(Q, headers=auth("caller")).status_code == 403  # call:* reads no queues
    for token in ("reader", "admin", "caller"):  # jobs:write retries and cancels, no more
        refused = client.post(f"{Q}/mail/pause", headers=auth(token))
        assert refused.status_code == 403, token
        assert "does not hold the queues:write permission" in refused.json()["message"]
    # the permission comes before the queue: no unknown_queue for those who may not pause
    assert client.post(f"{Q}/mial/pause", headers=auth("reader")).status_code == 403
    assert pauses(url) == {} and audit(url) == []


def test_without_an_authenticator_the_api_serves_nobody(serve: Serve) -> None:
    client = serve(deployment(authenticate=None))
    for method, path in (("GET", Q), ("POST", f"{Q}/mail/pause"), ("POST", f"{Q}/mail/resume")):
        answer = client.request(method, path, headers=auth("admin"))
        assert answer.status_code == 401, path
        assert "declares no authenticator" in answer.json()["message"]


def test_a_post_takes_json_and_no_input(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    # a form another site's page could post with a visitor's cookies: refused before acting
    form = client.post(
        f"{Q}/mail/pause",
        headers={"Authorization": "Bearer pauser"},
        data={"a": "b"},
    )
    assert form.status_code == 415 and form.json()["error"] == "unsupported_media_type"
    extra = client.post(f"{Q}/mail/pause", headers=auth("pauser"), content='{"reason": "x"}')
    assert extra.status_code == 422
    assert extra.json()["detail"] == [
        {"loc": ["reason"], "msg": "Extra inputs are not permitted", "type": "extra_forbidden"}
    ]
    assert client.post(f"{Q}/mail/pause", headers=auth("pauser"), content="[").status_code == 400
    assert client.get(f"{Q}/mail/pause", headers=auth("pauser")).status_code == 405
    assert pauses(url) == {}


def test_each_tenant_is_addressed_as_a_function_call_addresses_it(
    serve: Serve, tmp_path: Path
) -> None:
    acme, globex = (f"sqlite:///{tmp_path}/{t}.db" for t in ("acme", "globex"))
    client = serve(deployment(), registered={"acme": None, "globex": None})
    unnamed = client.post(f"{Q}/mail/pause", headers=auth("pauser"))
    assert unnamed.status_code == 400 and unnamed.json()["error"] == "tenant_required"
    done = client.post(f"{Q}/mail/pause", headers=auth("pauser", X_Ket_Tenant="acme"))
    assert done.json()["changed"] is True
    assert (pauses(acme), pauses(globex)) == ({"mail": "paula"}, {})
    listed = client.get(Q, headers=auth("reader", X_Ket_Tenant="globex")).json()["queues"]
    assert [q["paused"] for q in listed] == [False, False]
    unknown = client.get(Q, headers=auth("reader", X_Ket_Tenant="initech"))
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_tenant"


def test_a_tenant_whose_database_is_not_migrated_is_503_saying_the_cure(
    serve: Serve, tmp_path: Path
) -> None:
    client = serve(deployment(), registered={"acme": None, "fresh": None})
    (tmp_path / "fresh.db").unlink()  # a new database, never migrated: no ket tables yet
    for answer in (
        client.get(Q, headers=auth("reader", X_Ket_Tenant="fresh")),
        client.post(f"{Q}/mail/pause", headers=auth("pauser", X_Ket_Tenant="fresh")),
    ):
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "tenant_not_migrated"
        assert answer.json()["message"].endswith("an operator runs `ket migrate`")
        assert "Retry-After" not in answer.headers
    listed = client.get(Q, headers=auth("reader", X_Ket_Tenant="acme"))
    assert listed.status_code == 200
