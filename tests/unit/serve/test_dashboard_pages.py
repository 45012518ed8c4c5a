"""What the dashboard's pages show: every job-derived string as text (escaped, control
characters visible), secret input fields hidden, and the queues, schedules and workers of the
tenant asked about."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from ket.store.roster import SeenWorker, WorkerInfo
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, complete, deployment, report, send_job

D = "/dashboard/t/default"
ADMIN = {"Authorization": "Bearer admin"}
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def test_job_derived_strings_render_as_text(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job(to=HOSTILE + "\u202egnp.exe")], discard=1, error=HOSTILE)
    for path in (f"{D}/jobs", f"{D}/jobs/1", f"{D}/jobs?state=discarded"):
        page = client.get(path, headers=ADMIN).text
        assert "<script>alert" not in page and "<img src=x" not in page, path
    page = client.get(f"{D}/jobs/1", headers=ADMIN).text
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page  # the error and payload
    assert "\u202e" not in page and "\\u202egnp.exe" in page  # a bidi override, shown
    # the one script is the package's file: nothing inline, no inline style either
    scripts = [part.split(">")[0] for part in page.split("<script")[1:]]
    assert [s.startswith(' src="/dashboard/t/default/static/dashboard.js?v=') for s in scripts] == [
        True
    ]
    assert " style=" not in page and "<style" not in page


def test_secret_input_fields_are_hidden_on_the_job_page(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job(card="4111-1111-1111-1111")])
    page = client.get(f"{D}/jobs/1", headers=ADMIN).text
    assert "4111" not in page
    assert "&#34;card&#34;: &#34;***&#34;" in page


def test_the_job_page_shows_a_completed_job_s_result_with_its_secrets_hidden(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    [job_id] = arrange(url, [send_job()])
    result = '{"receipt": "r-1", "token": {"$secret": "tok_live_42"}}'
    complete(url, job_id, result)
    page = client.get(f"{D}/jobs/{job_id}", headers=ADMIN).text
    assert "<h2>Result</h2>" in page
    assert "&#34;receipt&#34;: &#34;r-1&#34;" in page and "&#34;token&#34;: &#34;***&#34;" in page
    assert "tok_live_42" not in page
    [other] = arrange(url, [send_job()])
    assert "<h2>Result</h2>" not in client.get(f"{D}/jobs/{other}", headers=ADMIN).text


def test_the_job_page_shows_a_running_job_s_progress_as_text(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    [job_id] = arrange(url, [send_job()])
    report(url, job_id, '{"fraction": 0.4, "note": "<b>charging</b>"}')
    page = client.get(f"{D}/jobs/{job_id}", headers=ADMIN).text
    assert "<dt>Progress</dt><dd>40% &lt;b&gt;charging&lt;/b&gt;</dd>" in page


def test_the_job_page_shows_its_error_history_and_the_retry_button(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job()], discard=1, error="mailbox full")
    page = client.get(f"{D}/jobs/1", headers=ADMIN).text
    assert "Errors (1)" in page and "mailbox full" in page and "Traceback:" in page
    assert "Retry now" in page and ">Cancel<" not in page
    assert client.get(f"{D}/jobs/2", headers=ADMIN).status_code == 404


def test_the_jobs_page_counts_by_state_filters_and_pages(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job() for _ in range(25)], discard=2)
    page = client.get(f"{D}/jobs?state=available&size=20", headers=ADMIN).text
    assert 'available <span class="count">23</span>' in page
    assert 'discarded <span class="count">2</span>' in page
    assert page.count('aria-label="Tick job ') == 20  # a row each
    assert 'href="/dashboard/t/default/jobs?state=available&amp;size=20&amp;page=2"' in page
    second = client.get(f"{D}/jobs?state=available&size=20&page=2", headers=ADMIN).text
    assert second.count('aria-label="Tick job ') == 3


def test_the_queues_page_shows_concurrency_counts_and_ages(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    arrange(url, [send_job(), send_job()], discard=1)
    page = client.get(f"{D}/queues", headers=ADMIN).text
    mail = page.split('<td><a href="/dashboard/t/default/jobs?queue=mail">mail</a></td>', 1)[1]
    row = mail.split("</tr>", 1)[0]
    assert "<td>3</td>" in row  # declared concurrency
    assert 'state=available&amp;queue=mail">1</a>' in row
    assert 'state=discarded&amp;queue=mail">1</a>' in row
    assert row.rstrip().endswith("<td>-</td>")  # no lease held
    assert '<td class="num">no limits</td>' in row  # nothing held back: no limit to hold
    assert "not declared" not in page


def test_the_schedules_page_shows_each_schedule(serve: Serve) -> None:
    client = serve(deployment())
    page = client.get(f"{D}/schedules", headers=ADMIN).text
    assert f'<td><a href="{D}/jobs?job=desk.tick">desk.tick</a></td>' in page
    assert "every 1m" in page and "not installed yet" in page


def _seen(
    worker_id: str, tenants: tuple[str, ...] | None, queues: dict[str, int], ago: float = 1.5
) -> SeenWorker:
    now = datetime.now(UTC)
    info = WorkerInfo(
        id=worker_id,
        host="vm",
        pid=7,
        started_at=now,
        tenants=tenants,
        queues=queues,
        version="0.1.0",
        manifest_hash="ab" * 32,
        interval_seconds=10,
    )
    return SeenWorker(info=info, last_seen_at=now, seen_seconds_ago=ago)


def test_the_workers_page_shows_only_the_workers_serving_this_tenant(serve: Serve) -> None:
    async def list_workers() -> list[SeenWorker]:
        return [
            _seen("w-all", None, {"mail": 3}),
            _seen("w-acme", ("acme",), {"mail": 3}),
            _seen("w-globex", ("globex",), {"default": 1, "mail": 3}),
        ]

    client = serve(
        deployment(), registered={"acme": None, "globex": None}, list_workers=list_workers
    )
    page = client.get("/dashboard/t/acme/workers", headers=ADMIN).text
    assert "w-all" in page and "w-acme" in page and "w-globex" not in page
    assert "mail=3" in page and "1.5s ago" in page


def test_the_workers_page_warns_of_a_queue_no_live_worker_of_the_tenant_serves(
    serve: Serve,
) -> None:
    async def list_workers() -> list[SeenWorker]:
        return [
            _seen("w-mail", None, {"mail": 3}),
            _seen("w-globex", ("globex",), {"default": 1}),  # another tenant's
            _seen("w-gone", None, {"default": 1}, ago=600),  # stale
        ]

    client = serve(
        deployment(), registered={"acme": None, "globex": None}, list_workers=list_workers
    )
    warning = "Queue default is served by no live worker of this tenant"
    assert warning in client.get("/dashboard/t/acme/workers", headers=ADMIN).text
    globex = client.get("/dashboard/t/globex/workers", headers=ADMIN).text
    assert "is served by no live worker" not in globex
