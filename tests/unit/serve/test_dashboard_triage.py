"""Triage on the dashboard: the jobs list shows each job's last error, how long ago it was due
and how long it took, filters by tag and opens a job by its id; a job's page folds the frames of
ket, Python and packages in its tracebacks, shows who acted on it, and asks before a cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ket.catalog import NO_OPTIONS, EnqueueOptions
from ket.store import JobClaim, Settle
from ket.store.sql import SqlStore
from ket.store.types import ErrorInfo
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import CATALOG, arrange, deployment, send_job, states

D = "/dashboard/t/default"
ADMIN = {"Authorization": "Bearer admin"}
TRACEBACK = """Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/ket/runtime/attempt.py", line 212, in run
    result = await handler(ctx, payload)
  File "/usr/lib/python3.12/asyncio/tasks.py", line 314, in __step_run_and_handle_result
    result = coro.send(None)
  File "/srv/shop/mail.py", line 18, in send
    deliver(message)
  File "/srv/shop/smtp.py", line 40, in deliver
    raise MailboxFull(address)
shop.smtp.MailboxFull: ada@example.com
"""


def _failed(url: str, tags: tuple[str, ...] = ()) -> int:
    """A desk.send job that ran once and was discarded with TRACEBACK; its id."""

    async def main() -> int:
        store = await SqlStore.open(url)
        try:
            options = EnqueueOptions(tags=tags) if tags else NO_OPTIONS
            job = CATALOG.new_job("desk.send", {"to": "ada@example.com"}, options)
            [row] = await store.job_insert([job])
            claim = JobClaim(queue="mail", limit=1, worker_id="w", lease_seconds=30)
            [claimed] = await store.job_claim(claim)
            error = ErrorInfo(error="MailboxFull: ada@example.com\nmore", traceback=TRACEBACK)
            outcome = Settle(id=claimed.id, fence=claimed.fence, outcome="discarded", error=error)
            await store.job_settle([outcome])
            return row.id
        finally:
            await store.close()

    return asyncio.run(main())


def _row(page: str, job_id: int) -> str:
    start = page.index(f'<td><a href="{D}/jobs/{job_id}">{job_id}</a></td>')
    return page[page.rindex("<tr", 0, start) : page.index("</tr>", start)]


def test_the_list_shows_the_last_error_how_long_ago_and_how_long_it_took(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    failed = _failed(url)
    [waiting] = arrange(url, [send_job()])
    page = client.get(f"{D}/jobs", headers=ADMIN).text
    assert "<th>Last error</th>" in page and "<th>Took</th>" in page
    row = _row(page, failed)
    assert '<td class="error">MailboxFull: ada@example.com</td>' in row  # its first line
    assert "ago</time>" in row and 'datetime="20' in row  # run at: relative, ISO for machines
    took = row.split('<td class="num">')[1].split("</td>")[0]
    assert took.endswith("s") and took != "-", took  # claimed to discarded
    assert '<td class="error"></td>' in _row(page, waiting)


def test_the_list_filters_by_tag_and_a_bulk_action_keeps_the_tag(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    tagged = _failed(url, tags=("vip",))
    plain = _failed(url)
    page = client.get(f"{D}/jobs?tag=vip", headers=ADMIN).text
    assert f'href="{D}/jobs/{tagged}"' in page and f'href="{D}/jobs/{plain}"' not in page
    assert 'name="tag" size="14" value="vip"' in page
    everything = client.get(f"{D}/jobs", headers=ADMIN).text
    assert f'<a href="{D}/jobs?tag=vip">vip</a>' in everything  # a tag links to its filter
    confirm = client.get(f"{D}/bulk/retry?tag=vip", headers=ADMIN).text
    assert "Retry 1 job in tenant default?" in confirm and ", tag vip." in confirm
    assert '<input type="hidden" name="tag" value="vip">' in confirm
    token = confirm.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    through = confirm.split('name="through_id" value="', 1)[1].split('"', 1)[0]
    client.post(
        f"{D}/bulk/retry",
        data={"csrf": token, "tag": "vip", "through_id": through, "count": "1"},
        headers=ADMIN,
    )
    assert states(url) == {tagged: "available", plain: "discarded"}
    bad = client.get(f"{D}/jobs?tag=%00x", headers=ADMIN)
    assert bad.status_code == 400 and "a tag must be" in bad.text


def test_a_job_is_opened_by_its_id_and_the_page_size_is_chosen(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    ids = arrange(url, [send_job() for _ in range(25)])
    found = client.get(f"{D}/jobs?find=%23{ids[3]}", headers=ADMIN, follow_redirects=False)
    assert (found.status_code, found.headers["location"]) == (303, f"{D}/jobs/{ids[3]}")
    missing = client.get(f"{D}/jobs?find=99999", headers=ADMIN)
    assert missing.status_code == 404 and "no job 99999 in tenant default" in missing.text
    assert client.get(f"{D}/jobs?find=%00", headers=ADMIN).status_code == 400
    [keyed] = arrange(
        url, [CATALOG.new_job("desk.send", {"to": "x"}, EnqueueOptions(unique_key="order-17"))]
    )
    by_key = client.get(f"{D}/jobs?find=order-17", headers=ADMIN).text
    assert "The jobs enqueued with unique key <strong>order-17</strong>" in by_key
    assert by_key.count('aria-label="Tick job ') == 1 and f'value="{keyed}"' in by_key
    assert "Retry these" not in by_key  # the filter's bulk actions know no unique key
    page = client.get(f"{D}/jobs?size=20", headers=ADMIN).text
    assert page.count('aria-label="Tick job ') == 20  # a row each
    assert "<option selected>20</option>" in page and 'rel="next"' in page


def test_a_traceback_folds_the_frames_of_ket_python_and_packages(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    failed = _failed(url)
    page = client.get(f"{D}/jobs/{failed}", headers=ADMIN).text
    # the app's two frames shown, marked; the two others folded, under one summary
    app = page.split('<pre class="app">', 1)[1].split("</pre>", 1)[0]
    assert "&#34;/srv/shop/mail.py&#34;, line 18" in app
    assert "&#34;/srv/shop/smtp.py&#34;, line 40" in app
    assert "dist-packages" not in app and "asyncio" not in app
    folded = page.split('<details class="library">', 1)[1].split("</details>", 1)[0]
    assert "<summary>2 frames of ket, Python or a package</summary>" in folded
    assert "ket/runtime/attempt.py" in folded and "asyncio/tasks.py" in folded
    assert "shop.smtp.MailboxFull: ada@example.com" in page  # the exception, shown


def test_the_job_page_shows_who_acted_on_it_and_a_cancel_is_asked_first(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    failed = _failed(url)
    [waiting] = arrange(url, [send_job()])
    page = client.get(f"{D}/jobs/{failed}", headers=ADMIN).text
    assert "No operator has acted on this job." in page
    token = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    client.post(f"{D}/jobs/{failed}/retry", data={"csrf": token}, headers=ADMIN)
    page = client.get(f"{D}/jobs/{failed}", headers=ADMIN).text
    trail = page.split("<h2>Audit trail</h2>", 1)[1]
    assert "<td>ada</td><td>dashboard</td><td>retry</td><td>discarded -&gt; available</td>" in trail
    assert "No operator has acted" not in trail

    job_page = client.get(f"{D}/jobs/{waiting}", headers=ADMIN).text
    assert f'<a class="button danger" href="{D}/jobs/{waiting}/cancel">Cancel&hellip;</a>' in (
        job_page
    )
    asked = client.get(f"{D}/jobs/{waiting}/cancel", headers=ADMIN)
    assert asked.status_code == 200
    assert f"Cancel job {waiting} (desk.send) in tenant default?" in asked.text
    assert states(url)[waiting] == "available"  # asking changes nothing
    token = asked.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    client.post(f"{D}/jobs/{waiting}/cancel", data={"csrf": token}, headers=ADMIN)
    assert states(url)[waiting] == "cancelled"
    again = client.get(f"{D}/jobs/{waiting}/cancel", headers=ADMIN)
    assert again.status_code == 409 and f"job {waiting} is cancelled" in again.text
    reader = client.get(f"{D}/jobs/{failed}/cancel", headers={"Authorization": "Bearer reader"})
    assert reader.status_code == 403


def test_the_rows_ticked_are_retried_and_no_other(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    first, second, third = (_failed(url) for _ in range(3))
    page = client.get(f"{D}/jobs", headers=ADMIN).text
    assert f'<input type="checkbox" name="id" value="{second}" aria-label="Tick job {second}">' in (
        page
    )
    assert f'formaction="{D}/bulk/cancel"' in page
    reader = client.get(f"{D}/jobs", headers={"Authorization": "Bearer reader"}).text
    assert 'type="checkbox"' not in reader  # no action, nothing to tick

    asked = client.get(f"{D}/bulk/retry?id={third}&id={first}", headers=ADMIN).text
    assert "Retry 2 jobs in tenant default?" in asked
    assert f"the jobs ticked: {third}, {first}." in asked
    assert f'<input type="hidden" name="ids" value="{third},{first}">' in asked
    token = asked.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    through = asked.split('name="through_id" value="', 1)[1].split('"', 1)[0]
    client.post(
        f"{D}/bulk/retry",
        data={"csrf": token, "ids": f"{third},{first}", "through_id": through, "count": "2"},
        headers=ADMIN,
    )
    assert states(url) == {first: "available", second: "discarded", third: "available"}
    too_many = "&".join(f"id={n}" for n in range(1, 102))
    refused = client.get(f"{D}/bulk/retry?{too_many}", headers=ADMIN)
    assert refused.status_code == 400 and "at most 100 jobs may be ticked at once" in refused.text
    assert client.get(f"{D}/bulk/retry?id=ada", headers=ADMIN).status_code == 400
