"""The dashboard on any screen, for any person, in Chromium: every page at 1440 px and at 390 px
(a phone), in the light and the dark colour scheme, fits the screen, follows the scheme, and has
no serious or critical accessibility violation by axe-core; the live refresh keeps the keyboard
focus where it was and says politely that the page changed; a schedule is paused, run now and
resumed from its page, each click landing in the database and the audit log."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import Page, expect

from ket.store.sql import SqlStore
from tests.browser.test_dashboard import (
    TOKEN,
    _audit,
    enqueue,
    job_states,
    on_store,
    running,  # noqa: F401 (the fixture, for these tests too)
    send,
)

SCREENS = {"desktop": (1440, 900), "phone": (390, 844)}
SERIOUS = ("serious", "critical")


def _sign_in(page: Page, url: str) -> None:
    page.fill("#token", TOKEN)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/signin$"))


def _serious(page: Page) -> list[str]:
    """The serious and critical axe-core violations of the page, one line each."""
    found = Axe().run(page).response["violations"]
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in found
        if v["impact"] in SERIOUS
    ]


def _fits(page: Page, width: int) -> None:
    """The page is no wider than the screen (a table scrolls in its own box)."""
    wide = page.evaluate("document.documentElement.scrollWidth")
    assert wide <= width, f"{page.url} is {wide} px wide on a {width} px screen"


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("screen", sorted(SCREENS))
def test_every_page_fits_the_screen_follows_the_scheme_and_passes_axe(
    browser: Any,
    running: tuple[Path, str],  # noqa: F811 (the fixture imported above)
    shots: Path,
    screen: str,
    scheme: str,
) -> None:
    root, url = running
    base = f"{url}/dashboard/t/default"
    width, height = SCREENS[screen]
    context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
    page = context.new_page()
    [failed] = enqueue(root, send("flaky@example.com", flaky=True))
    enqueue(root, *[send(f"user{n}@example.org") for n in range(4)])
    deadline = time.monotonic() + 20
    while job_states(root).get(failed) != "discarded" and time.monotonic() < deadline:
        time.sleep(0.1)

    problems: dict[str, list[str]] = {}
    page.goto(f"{base}/jobs")
    problems["sign-in"] = _serious(page)
    _fits(page, width)
    page.screenshot(path=shots / f"{screen}-{scheme}-00-sign-in.png", full_page=True)
    _sign_in(page, url)
    pages = [
        "jobs",
        "charts",
        f"jobs/{failed}",
        f"jobs/{failed}/cancel",  # a cancel refused (409: the job is discarded), its reason
        "queues",
        "schedules",
        "workers",
        "fleet",
        "audit",
        "nowhere",
    ]
    for number, name in enumerate(pages, start=1):
        page.goto(f"{base}/{name}")
        expect(page.locator("h1")).to_be_visible()
        problems[name] = _serious(page)
        _fits(page, width)
        slug = name.split("?")[0].replace("/", "-")
        page.screenshot(path=shots / f"{screen}-{scheme}-{number:02d}-{slug}.png", full_page=True)
    assert {name: found for name, found in problems.items() if found} == {}
    # the page follows the system's scheme: a dark background in the dark one, light otherwise
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    red, green, blue = (int(n) for n in re.findall(r"\d+", background)[:3])
    assert (red + green + blue < 150) == (scheme == "dark"), background
    context.close()


def test_the_live_refresh_keeps_the_focus_and_says_the_page_changed(
    browser: Any,
    running: tuple[Path, str],  # noqa: F811 (the fixture imported above)
) -> None:
    root, url = running
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/dashboard/t/default/jobs")
    _sign_in(page, url)
    queues = page.locator("header.top nav a", has_text="Queues")
    link = page.locator("nav.states a").filter(has_text="completed")
    link.focus()
    expect(link).to_be_focused()
    expect(page.locator("#live-status")).to_have_text("")
    enqueue(root, *[send(f"user{n}@example.org") for n in range(3)])
    # the counts change under the focused link: the page is new, the focus is where it was
    expect(page.locator("nav.states a.state-completed .count")).to_have_text("3", timeout=20_000)
    expect(page.locator("#live-status")).to_have_text(re.compile("^Updated at "))
    expect(page.locator("nav.states a").filter(has_text="completed")).to_be_focused()
    expect(queues).not_to_be_focused()
    # the live button says whether it is on, to a screen reader too
    toggle = page.locator("button.live")
    expect(toggle).to_have_attribute("aria-pressed", "true")
    toggle.press("Enter")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    context.close()


def test_an_operator_pauses_runs_and_resumes_a_schedule_from_its_page(
    browser: Any,
    running: tuple[Path, str],  # noqa: F811 (the fixture imported above)
    shots: Path,
) -> None:
    root, url = running
    base = f"{url}/dashboard/t/default"
    context = browser.new_context(viewport={"width": 1440, "height": 800})
    page = context.new_page()
    page.goto(f"{base}/schedules")
    _sign_in(page, url)
    row = page.locator("table.schedules tbody tr", has=page.locator("a", has_text="shop.tick"))
    expect(row.locator(".state")).to_have_text("active", timeout=20_000)  # the first sweep

    row.get_by_role("button", name="Pause shop.tick").click()
    expect(page.locator(".notice")).to_contain_text("Paused: the schedule fires no tick")
    expect(row).to_have_class("paused")
    assert on_store(root, _paused) == {"shop.tick": True}
    page.screenshot(path=shots / "01-schedule-paused.png", full_page=True)

    row.get_by_role("button", name="Run shop.tick now").click()
    expect(page.locator(".notice")).to_contain_text("Fired now: this job is the schedule's run")
    fired = int(page.url.split("/jobs/")[1].split("?")[0])
    deadline = time.monotonic() + 20
    while job_states(root).get(fired) != "completed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_states(root)[fired] == "completed"  # the worker ran it, paused schedule or not
    page.screenshot(path=shots / "02-run-now-job.png", full_page=True)

    page.goto(f"{base}/schedules")
    row.get_by_role("button", name="Resume shop.tick").click()
    expect(page.locator(".notice")).to_contain_text("Resumed: the schedule fires its ticks")
    assert on_store(root, _paused) == {"shop.tick": False}
    entries = [(e.subject, e.action, dict(e.selection), e.job_id) for e in on_store(root, _audit)]
    assert entries == [
        ("ops-ada", "resume", {"schedule": "shop.tick"}, None),
        ("ops-ada", "enqueue", {"schedule": "shop.tick"}, fired),
        ("ops-ada", "pause", {"schedule": "shop.tick"}, None),
    ]
    context.close()


async def _paused(store: SqlStore) -> dict[str, bool]:
    return {name: state.paused for name, state in (await store.schedule_get(["shop.tick"])).items()}


def test_an_operator_retries_the_rows_ticked_and_no_other(
    browser: Any,
    running: tuple[Path, str],  # noqa: F811 (the fixture imported above)
    shots: Path,
) -> None:
    root, url = running
    base = f"{url}/dashboard/t/default"
    failed = enqueue(root, *[send(f"flaky{n}@example.com", flaky=True) for n in range(3)])
    deadline = time.monotonic() + 20
    while set(job_states(root).values()) != {"discarded"} and time.monotonic() < deadline:
        time.sleep(0.1)
    assert set(job_states(root).values()) == {"discarded"}
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{base}/jobs?state=discarded")
    _sign_in(page, url)
    toggle = page.locator("button.live")
    toggle.click()  # the list holds still while rows are ticked
    for job_id in failed[:2]:
        page.get_by_role("checkbox", name=f"Tick job {job_id}").check()
    page.get_by_role("button", name="Retry ticked…").click()
    expect(page.locator(".question")).to_have_text("Retry 2 jobs in tenant default?")
    page.screenshot(path=shots / "01-retry-ticked-confirmation.png", full_page=True)
    page.locator("form.confirm button").click()
    expect(page.locator(".notice")).to_have_text("Retried 2 jobs; 0 left as they were.")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and [job_states(root)[i] for i in failed[:2]] != [
        "completed",
        "completed",
    ]:
        time.sleep(0.1)
    states = job_states(root)
    assert [states[i] for i in failed] == ["completed", "completed", "discarded"]
    context.close()
