"""`ket serve` while its tenant's PostgreSQL stops and starts again (issue 27, item 9).

A private cluster (cluster.py) holds the tenant's database; a real `ket serve` process serves
the functions and the dashboard. While the server is stopped, a function that writes and a
dashboard page answer 503 `database_unavailable` with `Retry-After`, and the server's log has
one line a minute for it, without a traceback; once the server is back, both answer again.

Before, the calls answered `500 function_failed`, each logged with a full traceback, and the
dashboard's error escaped to the HTTP server's own handler.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import psycopg
import pytest

from tests.acceptance.conftest import run_ket
from tests.acceptance.test_cli_serve import SERVED, TOKEN, Server

from .cluster import PrivateCluster

# the functions of the serve tests, their caller allowed to read the dashboard too
APP = SERVED.replace('permissions={"call:*"}', 'permissions={"call:*", "jobs:read"}')
assert APP != SERVED
CALLS_WHILE_AWAY = 10
BACK_WITHIN = 20.0  # seconds from the server's start to a call answered 200


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    with PrivateCluster() as made:
        yield made


def _call(server: Server, text: str) -> httpx.Response:
    return httpx.post(
        f"{server.url}/functions/app.add_note", json={"text": text}, headers=TOKEN, timeout=30
    )


def test_a_database_restart_answers_503_with_retry_after_and_logs_one_line(
    cluster: PrivateCluster, tmp_path: Path
) -> None:
    root = tmp_path / "project"
    (root / "app").mkdir(parents=True)
    (root / "app" / "workspace.py").write_text(APP)
    (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
    with psycopg.connect(cluster.url("postgres"), autocommit=True) as admin:
        admin.execute("CREATE DATABASE shop")
    env = {"KET_DATABASE_URL": cluster.url("shop"), "KET_LOG_LEVEL": "INFO"}
    migrate = run_ket("migrate", cwd=root, env=env)
    assert migrate.code == 0, migrate.out + migrate.err
    server = Server(root, "serve", env=env)
    try:
        assert _call(server, "before").status_code == 200
        cluster.stop("fast")
        answers = [_call(server, f"away {n}") for n in range(CALLS_WHILE_AWAY)]
        page = httpx.get(f"{server.url}/dashboard/t/default/jobs", headers=TOKEN, timeout=30)
        for answer in answers:
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "database_unavailable"
            assert answer.headers["retry-after"] == "5"
            assert "Traceback" not in answer.text
        assert page.status_code == 503 and page.headers["retry-after"] == "5", page.text
        assert "cannot be reached now" in page.text
        cluster.start()
        deadline = time.monotonic() + BACK_WITHIN
        while (back := _call(server, "after")).status_code != 200:
            assert time.monotonic() < deadline, back.text
            time.sleep(0.5)
        assert (
            httpx.get(
                f"{server.url}/dashboard/t/default/jobs", headers=TOKEN, timeout=30
            ).status_code
            == 200
        )
    finally:
        code, output = server.stop()
    assert code == 0, output
    away = [line for line in output.splitlines() if "the database of tenant default" in line]
    # one line for each kind of failure, not one per request: the refused connections of the
    # outage, and (once it is back) a pooled connection the shutdown ended
    refused = [line for line in away if "Connection refused" in line]
    assert len(refused) == 1 and len(away) <= 2, output
    assert all(" WARNING " in line for line in away), output
    assert "Traceback" not in output and "function_failed" not in output, output
    assert "raised (tenant" not in output, output  # not logged as the function's own failure
