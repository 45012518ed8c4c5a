"""Pausing, resuming and running a schedule now from the dashboard's Schedules page: shown to
whoever holds `schedules:write` only, refused to anyone else, guarded as every action is, and
recorded in the audit log with the principal's subject."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import audit, deployment, schedule_states, states

D = "/dashboard/t/default"
SAM = {"Authorization": "Bearer scheduler"}


def _csrf(client: TestClient, headers: dict[str, str]) -> str:
    page = client.get(f"{D}/schedules", headers=headers)
    assert page.status_code == 200, page.text
    return page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_an_operator_pauses_resumes_and_runs_a_schedule_and_the_audit_log_names_them(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    page = client.get(f"{D}/schedules", headers=SAM).text
    assert f'action="{D}/schedules/desk.tick/pause"' in page
    assert f'action="{D}/schedules/desk.tick/run"' in page
    token = _csrf(client, SAM)

    done = client.post(
        f"{D}/schedules/desk.tick/pause", data={"csrf": token}, headers=SAM, follow_redirects=False
    )
    assert (done.status_code, done.headers["location"]) == (
        303,
        f"{D}/schedules?notice=schedule_paused",
    )
    assert schedule_states(url) == {"desk.tick": True}
    page = client.get(done.headers["location"], headers=SAM).text
    assert "Paused: the schedule fires no tick until it is resumed" in page
    assert '<tr class="paused">' in page
    assert '<span class="state state-paused">paused</span>' in page
    assert f'action="{D}/schedules/desk.tick/resume"' in page
    again = client.post(f"{D}/schedules/desk.tick/pause", data={"csrf": token}, headers=SAM)
    assert "Nothing changed: the schedule was already paused." in again.text

    ran = client.post(
        f"{D}/schedules/desk.tick/run", data={"csrf": token}, headers=SAM, follow_redirects=False
    )
    assert ran.status_code == 303
    [(job_id, state)] = states(url).items()  # the one job the schedule fired
    assert ran.headers["location"] == f"{D}/jobs/{job_id}?notice=schedule_run"
    assert state == "available"
    shown = client.get(ran.headers["location"], headers=SAM).text
    assert "Fired now: this job is the schedule&#39;s run" in shown
    assert schedule_states(url) == {"desk.tick": True}  # a run now leaves the pause

    client.post(f"{D}/schedules/desk.tick/resume", data={"csrf": token}, headers=SAM)
    assert schedule_states(url) == {"desk.tick": False}
    entries = [
        (e.subject, e.source, e.action, dict(e.selection), e.job_id, e.changed) for e in audit(url)
    ]
    assert entries == [
        ("sam", "dashboard", "resume", {"schedule": "desk.tick"}, None, 1),
        ("sam", "dashboard", "enqueue", {"schedule": "desk.tick"}, job_id, 1),
        ("sam", "dashboard", "pause", {"schedule": "desk.tick"}, None, 0),
        ("sam", "dashboard", "pause", {"schedule": "desk.tick"}, None, 1),
    ]
    log = client.get(f"{D}/audit", headers=SAM).text
    assert log.count(f'<a href="{D}/schedules">schedule desk.tick</a>') == 3
    assert f'<a href="{D}/jobs/{job_id}">job {job_id}</a>' in log


def test_without_schedules_write_there_is_no_button_and_a_forged_post_is_refused(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    for token in ("reader", "admin", "ops"):  # jobs:write and queues:write touch no schedule
        headers = {"Authorization": f"Bearer {token}"}
        page = client.get(f"{D}/schedules", headers=headers).text
        assert "desk.tick" in page  # the schedule is shown to every reader
        assert "/pause" not in page and "/run" not in page, token
        own = _csrf(client, headers)
        for action in ("pause", "resume", "run"):
            refused = client.post(
                f"{D}/schedules/desk.tick/{action}", data={"csrf": own}, headers=headers
            )
            assert refused.status_code == 403, (token, action)
            assert "does not hold the schedules:write permission" in refused.text
    assert schedule_states(url) == {} and states(url) == {} and audit(url) == []
    anonymous = client.post(f"{D}/schedules/desk.tick/run", data={"csrf": "x"})
    assert anonymous.status_code == 401
    assert states(url) == {}


def test_a_schedule_action_is_guarded_and_names_the_scheduled_jobs(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    action = f"{D}/schedules/desk.tick/run"
    reader = _csrf(client, {"Authorization": "Bearer reader"})  # another subject's
    for data in ({"x": "1"}, {"csrf": "1.deadbeef"}, {"csrf": reader}):
        answer = client.post(action, data=data, headers=SAM)
        assert (answer.status_code, "security token" in answer.text) == (403, True), data
    token = _csrf(client, SAM)
    cross = client.post(
        action, data={"csrf": token}, headers={**SAM, "Sec-Fetch-Site": "cross-site"}
    )
    assert cross.status_code == 403 and "another site" in cross.text
    assert client.get(action, headers=SAM).status_code == 404  # a GET changes nothing
    for name in ("desk.send", "desk.nope"):  # not a scheduled job
        unknown = client.post(f"{D}/schedules/{name}/run", data={"csrf": token}, headers=SAM)
        assert unknown.status_code == 404
        assert f"no scheduled job &#39;{name}&#39; in deployment &#39;desk&#39; (desk.tick)" in (
            unknown.text
        )
    assert states(url) == {} and audit(url) == []
