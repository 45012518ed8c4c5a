"""Browser tests: the dashboard in real Chromium (Debian's, through Playwright), against real
`ket serve` and `ket worker` processes.

Playwright's own browser download cannot run here, so the tests drive the `chromium` that
`.ci/run` installs with apt. Where it is missing, or cannot start, the tests skip with the
reason, except in CI (`CI=true`, or `KET_REQUIRE_BROWSER=1` as `.ci/run` sets), where they
fail. Screenshots go to `test-output/dashboard/` at the repository's root (kept out of git), or
to `KET_TEST_OUTPUT` when set; each test prints the paths of the ones it took.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.conftest import project  # noqa: F401 (the fixture, for these tests too)

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("KET_CHROMIUM", "/usr/bin/chromium")
IN_CI = (
    os.environ.get("CI", "").lower() in ("1", "true", "yes")
    or os.environ.get("KET_REQUIRE_BROWSER") == "1"
)


def _unavailable(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"the browser tests must run in CI, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Chromium, headless, started once per test process."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        _unavailable(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        try:
            started = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"]
            )
        except Exception as error:  # any launch failure is the same news
            _unavailable(f"chromium at {CHROMIUM} cannot start: {error}")
        try:
            yield started
        finally:
            started.close()


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The folder this test's screenshots go to (emptied first); their paths are printed."""
    root = Path(os.environ.get("KET_TEST_OUTPUT", REPO / "test-output")) / "dashboard"
    folder = root / request.node.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    yield folder
    taken = sorted(folder.glob("*.png"))
    print(f"\nscreenshots of {request.node.name}:")
    for path in taken:
        print(f"  {path}")
