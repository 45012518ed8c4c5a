"""The example app's dashboard as docs/serve.md says to use it: `ERP_API_TOKEN=... ket serve`,
then sign in at /dashboard/ with that token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx  # the dev extra installs httpx2 (as Starlette's TestClient does)

from tests.acceptance.conftest import REPO, run_ket
from tests.acceptance.test_cli_serve import Server, start  # noqa: F401 (the fixture)


def test_the_example_app_signs_in_to_its_dashboard_with_its_api_token(
    start: Callable[..., Server],  # noqa: F811
    tmp_path: Path,
) -> None:
    text = (REPO / "docs" / "serve.md").read_text(encoding="utf-8")
    assert "`ERP_API_TOKEN=s3cret ket serve`, open `http://127.0.0.1:8000/dashboard/`" in text
    env = {"ERP_API_TOKEN": "s3cret", "KET_DATABASE_URL": f"sqlite:///{tmp_path}/{{tenant}}.db"}
    assert run_ket("migrate", env=env).code == 0
    server = start(REPO, "serve", env=env)
    with httpx.Client(base_url=server.url) as browser:
        assert browser.get("/dashboard/").status_code == 401
        signed = browser.post("/dashboard/signin", data={"token": "s3cret"})
        assert signed.status_code == 303
        assert signed.headers["location"] == "/dashboard/t/default/jobs"
        jobs = browser.get("/dashboard/t/default/jobs")
        assert jobs.status_code == 200 and "erp-api" in jobs.text and "Retry these" in jobs.text
    code, output = server.stop()
    assert code == 0, output
