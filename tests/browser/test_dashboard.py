"""The dashboard as an operator uses it, in Chromium: sign in, watch jobs a running worker
completes, open one, retry a discarded job and see it complete, cancel by filter, pause a queue
and see its jobs wait, then resume it; a payload holding a script shows as text under a strict
CSP; without credentials nothing is served, and a reader can neither retry nor pause."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Page, expect

from ket.store import AuditQuery, JobQuery, NewJob
from ket.store.sql import SqlStore
from tests.acceptance.conftest import Project, run_ket
from tests.acceptance.test_cli_serve import Server

T = TypeVar("T")
TOKEN = "d4shb0ard-t0ken"
APP = '''
import hmac
import os

from ket import Discard, define_deployment, define_job, define_module
from ket.serve import AuthRequest, Principal


async def authenticate(request: AuthRequest) -> Principal | None:
    """The operator with the token in OPS_TOKEN may read and steer jobs, queues and schedules;
    the reader may read."""
    token = request.bearer_token() or ""
    if hmac.compare_digest(token.encode(), os.environ["OPS_TOKEN"].encode()):
        return Principal(
            subject="ops-ada",
            permissions={
                "jobs:read", "jobs:write", "queues:write", "schedules:write", "fleet:read"
            },
        )
    if token == "reader":
        return Principal(subject="rita", permissions={"jobs:read"})
    return None


async def send(ctx, input):
    if input.flaky and ctx.job.attempt == 1:
        raise Discard("the mail server said no (the first time)")


async def tick(ctx, input):
    pass


shop = define_module(
    name="shop",
    jobs={
        "send": define_job(
            input={"to": "string", "flaky": "bool?", "card": "secret?"},
            queue="mail",
            idempotent=True,
            max_attempts=1,
            handler=send,
        ),
        # daily: a tick during the test would add a completed job to the counts it checks
        "tick": define_job(
            idempotent=True, schedule={"daily_at": "03:00", "timezone": "UTC"}, handler=tick
        ),
    },
)
main = define_deployment(
    name="main",
    modules=[shop],
    worker={"queues": {"default": 1, "mail": 2, "later": 1}, "poll_max_ms": 200},
    serve={"authenticate": authenticate},
)
'''
SCRIPT = "<script>window.pwned = 1; alert('pwned')</script>"
CSP = "default-src 'none'; script-src 'self'; style-src 'self' 'sha256-"


@pytest.fixture
def running(project: Project) -> Iterator[tuple[Path, str]]:
    """A project with its database migrated, `ket serve` and `ket worker` running: its root
    and the server's address."""
    root = project({"app/workspace.py": APP})
    env = {"OPS_TOKEN": TOKEN}
    assert run_ket("migrate", cwd=root, env=env).code == 0
    server = Server(root, "serve", env=env)
    worker = subprocess.Popen(
        [sys.executable, "-m", "ket.cli.main", "worker"],
        cwd=root,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield root, server.url
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        server.kill()


def on_store(root: Path, body: Callable[[SqlStore], Awaitable[T]]) -> T:
    """`body` run on the project's database, as a producer or an operator's script would."""

    async def main() -> T:
        store = await SqlStore.open(f"sqlite:///{root / '.ket' / 'default.db'}")
        try:
            return await body(store)
        finally:
            await store.close()

    # Playwright's sync API runs an event loop on this thread: the store gets one of its own
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(main())).result()


def enqueue(root: Path, *jobs: NewJob) -> list[int]:
    """Insert `jobs` into the project's database, as a producer would; their ids."""

    async def insert(store: SqlStore) -> list[int]:
        return [row.id for row in await store.job_insert(list(jobs))]

    return on_store(root, insert)


def job_states(root: Path) -> dict[int, str]:
    """Job id -> state, in the project's database."""

    async def states(store: SqlStore) -> dict[int, str]:
        return {r.id: r.state for r in await store.job_list(JobQuery(limit=1_000))}

    return on_store(root, states)


def send(to: str = "ada@example.com", **input: Any) -> NewJob:
    return NewJob(name="shop.send", queue="mail", max_attempts=1, payload={"to": to, **input})


def test_an_operator_watches_retries_and_cancels_jobs(
    browser: Any, running: tuple[Path, str], shots: Path
) -> None:
    root, url = running
    base = f"{url}/dashboard"
    context = browser.new_context(viewport={"width": 1360, "height": 860})
    page = context.new_page()
    dialogs: list[str] = []

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    shot = _shooter(page, shots)

    # signed out: the page is the sign-in form, answered 401 under the CSP
    answer = page.goto(f"{base}/t/default/jobs")
    assert answer is not None and answer.status == 401
    assert answer.headers["content-security-policy"].startswith(CSP)
    shot("01-sign-in")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/dashboard/t/default/jobs$"))

    # jobs flowing from the running worker, onto the page without a reload
    *_, scripted = enqueue(root, *[send(f"user{n}@example.com") for n in range(6)], send(SCRIPT))
    [flaky] = enqueue(root, send("flaky@example.com", flaky=True))
    expect(page.locator("nav.states a.state-completed .count")).to_have_text("7", timeout=20_000)
    expect(page.locator("nav.states a.state-discarded .count")).to_have_text("1", timeout=20_000)
    shot("02-jobs")

    # a payload holding a script is text, and no script of it ran
    page.locator(f"a[href='/dashboard/t/default/jobs/{scripted}']").first.click()
    expect(page.locator("pre.payload")).to_contain_text(SCRIPT)
    assert page.evaluate("window.pwned") is None and dialogs == []
    shot("03-job-with-a-script-payload")

    # the discarded job: its error, a retry, and it completes
    page.goto(f"{base}/t/default/jobs?state=discarded")
    page.locator(f"a[href='/dashboard/t/default/jobs/{flaky}']").first.click()
    expect(page.locator("details.error > summary")).to_contain_text("the mail server said no")
    shot("04-discarded-job")
    page.click("text=Retry now")
    expect(page.locator(".notice")).to_have_text("Retried: the job is available now.")
    _reload_until(page, "completed")
    shot("05-retried-job-completed")

    # cancel by filter: the confirmation counts the jobs, and only they are cancelled
    later = datetime.now(UTC) + timedelta(hours=1)
    enqueue(root, *[NewJob(name="shop.send", queue="later", run_at=later, payload={"to": "x"})] * 3)
    page.goto(f"{base}/t/default/jobs")
    page.select_option("select[name=queue]", "later")
    page.click("form.filters button")
    page.click("text=Cancel these")
    expect(page.locator(".question")).to_have_text("Cancel 3 jobs in tenant default?")
    shot("06-cancel-by-filter-confirmation")
    page.click("form.confirm button")
    expect(page.locator(".notice")).to_have_text("Cancelled 3 jobs; 0 left as they were.")
    expect(page.locator("nav.states a.state-cancelled .count")).to_have_text("3")
    shot("07-cancelled-by-filter")

    for name, check in (
        ("queues", "table.queues"),
        ("schedules", "table.schedules"),
        ("workers", "table.workers"),
        ("audit", "table.audit"),
    ):
        page.goto(f"{base}/t/default/{name}")
        # a worker records itself within one interval (10 s here): the live page shows it then
        expect(page.locator(check)).to_be_visible(timeout=20_000)
        shot(f"08-{name}")
    expect(page.locator("table.audit tbody tr")).to_have_count(2)
    expect(page.locator("table.audit tbody tr").first).to_contain_text("ops-ada")
    page.goto(f"{base}/t/default/workers")
    expect(page.locator("table.workers")).to_contain_text("live")
    context.close()


def test_a_reader_cannot_retry_and_nothing_is_served_without_credentials(
    browser: Any, running: tuple[Path, str], shots: Path
) -> None:
    root, url = running
    base = f"{url}/dashboard/t/default"
    [job] = enqueue(root, send("flaky@example.com", flaky=True))
    anonymous = browser.new_context()
    for path in (
        "/jobs",
        f"/jobs/{job}",
        "/queues",
        "/schedules",
        "/workers",
        "/audit",
        "/static/dashboard.css",
        "/static/dashboard.js",
        "/bulk/retry",
        "/nothing",
    ):
        answer = anonymous.request.get(base + path)
        assert answer.status == 401, path
        assert answer.headers["content-security-policy"].startswith(CSP), path
    for path in (f"/jobs/{job}/retry", f"/jobs/{job}/cancel", "/bulk/cancel", "/signout"):
        answer = anonymous.request.post(base + path, form={"csrf": "x"})
        assert answer.status == 401, path
    assert anonymous.request.get(f"{url}/dashboard/").status == 401
    anonymous.close()

    reader = browser.new_context(extra_http_headers={"Authorization": "Bearer reader"})
    page = reader.new_page()
    page.goto(f"{base}/jobs/{job}")
    _reload_until(page, "discarded")
    assert page.locator("text=Retry now").count() == 0
    _shooter(page, shots)("01-read-only-job")
    # no Pause on the Queues page, and one posted anyway, with the reader's own form token, is
    # refused
    page.goto(f"{base}/queues")
    expect(page.locator("table.queues")).to_contain_text("mail")
    assert page.locator("form[action$='/pause'], form[action$='/resume']").count() == 0
    csrf = page.locator("input[name=csrf]").first.get_attribute("value") or ""
    _shooter(page, shots)("02-read-only-queues")
    forged = reader.request.post(f"{base}/queues/mail/pause", form={"csrf": csrf})
    assert forged.status == 403 and "does not hold the queues:write permission" in forged.text()
    api = reader.request.post(
        f"{url}/operator/queues/mail/pause", headers={"Content-Type": "application/json"}
    )
    assert api.status == 403
    assert on_store(root, _pauses) == {}
    reader.close()


def _reload_until(page: Page, state: str, seconds: float = 20) -> None:
    """Reload the job's page until it shows `state` (a job's page is not live)."""
    deadline = time.monotonic() + seconds
    while page.locator("h1 .state").inner_text() != state and time.monotonic() < deadline:
        time.sleep(0.2)
        page.reload()
    expect(page.locator("h1 .state")).to_have_text(state)


def _shooter(page: Page, folder: Path) -> Callable[[str], None]:
    def take(name: str) -> None:
        page.screenshot(path=str(folder / f"{name}.png"), full_page=True)

    return take


def test_a_session_is_not_the_token_and_signing_out_ends_it_for_every_copy(
    browser: Any, running: tuple[Path, str], shots: Path
) -> None:
    _, url = running
    jobs = f"{url}/dashboard/t/default/jobs"
    first = browser.new_context()
    page = first.new_page()
    page.goto(jobs)
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/dashboard/t/default/jobs$"))
    [cookie] = [c for c in first.cookies() if c["name"] == "ket_dashboard"]
    assert TOKEN not in cookie["value"] and cookie["value"].startswith("v1.default.")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/dashboard"
    assert page.evaluate("document.cookie") == ""  # no script can read it
    # the cookie's value is no token: refused as a bearer token on /functions/
    called = first.request.post(
        f"{url}/functions/shop.nothing",
        headers={"Authorization": f"Bearer {cookie['value']}"},
        data="{}",
    )
    assert called.status == 401
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    # a copy of the cookie in another browser admits, until the session is signed out
    second = browser.new_context()
    second.add_cookies([{**cookie}])
    other = second.new_page()
    opened = other.goto(jobs)
    assert opened is not None and opened.status == 200
    page.click("form[action$=signout] button")  # Sign out
    expect(page.locator("#token")).to_be_visible()
    assert not [c for c in first.cookies() if c["name"] == "ket_dashboard"]
    refused = other.goto(jobs)
    assert refused is not None and refused.status == 401
    expect(other.locator("#token")).to_be_visible()
    _shooter(other, shots)("01-copied-cookie-after-sign-out")
    # and a form of the signed-out session's pages does nothing with the copy
    posted = second.request.post(
        f"{url}/dashboard/t/default/signout",
        form={"csrf": csrf or ""},
        headers={"Origin": url},
    )
    assert posted.status == 401
    first.close()
    second.close()


def test_an_operator_pauses_a_queue_its_jobs_wait_and_a_resume_runs_them(
    browser: Any, running: tuple[Path, str], shots: Path
) -> None:
    root, url = running
    base = f"{url}/dashboard/t/default"
    context = browser.new_context(viewport={"width": 1360, "height": 760})
    page = context.new_page()
    shot = _shooter(page, shots)
    page.goto(f"{base}/queues")
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(r"/dashboard/t/default/queues$"))
    mail = page.locator(
        "table.queues tbody tr", has=page.locator("a", has_text=re.compile("^mail$"))
    )
    expect(mail.locator(".state")).to_have_text("active")
    shot("01-queues")

    mail.locator("button", has_text="Pause").click()
    expect(page.locator(".notice")).to_contain_text("Paused: no worker claims the queue's jobs")
    expect(mail).to_have_class("paused")
    expect(mail.locator(".queue-state")).to_contain_text("paused by ops-ada since")
    expect(page.locator(".paused-queues")).to_contain_text("Paused in tenant default: mail")
    shot("02-mail-paused")

    # the worker runs the other queues, and leaves the paused one's jobs waiting
    [waiting] = enqueue(root, send("waits@example.com"))
    [other] = enqueue(root, NewJob(name="shop.send", queue="default", payload={"to": "x"}))
    deadline = time.monotonic() + 20
    while job_states(root).get(other) != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # a second more: every worker honours a pause within one
    assert job_states(root) == {waiting: "available", other: "completed"}
    assert on_store(root, _pauses) == {"mail": "ops-ada"}
    [entry] = on_store(root, _audit)
    assert (entry.subject, entry.source, entry.action, dict(entry.selection)) == (
        "ops-ada",
        "dashboard",
        "pause",
        {"queue": "mail"},
    )
    # the operator API of the same server says the same
    listed = context.request.get(
        f"{url}/operator/queues", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert listed.status == 200
    assert [(q["queue"], q["paused_by"], q["available"]) for q in listed.json()["queues"]] == [
        ("default", None, 0),
        ("later", None, 0),
        ("mail", "ops-ada", 1),
    ]
    expect(mail.locator("td.num").first).to_have_text("1")  # available, on the live page
    shot("03-mail-waiting")

    mail.locator("button", has_text="Resume").click()
    expect(page.locator(".notice")).to_contain_text("Resumed")
    expect(mail.locator(".state")).to_have_text("active")
    expect(page.locator(".paused-queues")).to_have_count(0)
    deadline = time.monotonic() + 20
    while job_states(root).get(waiting) != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_states(root)[waiting] == "completed"
    assert on_store(root, _pauses) == {}
    page.goto(f"{base}/audit")
    rows = page.locator("table.audit tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("resume")
    expect(rows.first).to_contain_text("queue mail")
    shot("04-audit")
    context.close()


async def _pauses(store: SqlStore) -> dict[str, str]:
    return {queue: pause.paused_by for queue, pause in (await store.queue_pauses()).items()}


async def _audit(store: SqlStore) -> list[Any]:
    return [record.entry for record in await store.audit_list(AuditQuery())]
