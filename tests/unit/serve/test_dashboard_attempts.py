"""The job page lists each attempt: when it started, how long it took, the worker that ran it
and how it ended; the one running now says so."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from ket.store import JobClaim, Settle
from ket.store.sql import SqlStore
from ket.store.types import ErrorInfo, Outcome
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import deployment, send_job

D = "/dashboard/t/default"
READER = {"Authorization": "Bearer reader"}


def _attempted(url: str, outcomes: list[Outcome], *, running: bool = False) -> int:
    """A desk.send job attempted once per outcome, each by worker w1, w2, ... (and once more,
    running still, when `running`): its id."""

    async def main() -> int:
        store = await SqlStore.open(url)
        try:
            [inserted] = await store.job_insert([send_job()])
            for n, outcome in enumerate([*outcomes, None] if running else outcomes, start=1):
                claim = JobClaim(queue="mail", limit=1, worker_id=f"w{n}", lease_seconds=30)
                [job] = await store.job_claim(claim)
                if outcome is None:
                    break
                error = None if outcome == "completed" else ErrorInfo(error=f"boom {n}\nmore")
                await store.job_settle(
                    [Settle(id=job.id, fence=job.fence, outcome=outcome, error=error)]
                )
            return inserted.id
        finally:
            await store.close()

    return asyncio.run(main())


def _rows(page: str) -> list[list[str]]:
    table = page.split('<table class="attempts">', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def test_each_attempt_is_listed_with_its_worker_duration_and_outcome(
    serve: Serve, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    job_id = _attempted(url, ["retryable", "retryable", "completed"])
    page = client.get(f"{D}/jobs/{job_id}", headers=READER).text
    assert "<h2>Attempts (3)</h2>" in page
    rows = _rows(page)
    assert [(r[0], r[3], r[4]) for r in rows] == [
        ("1", "w1", "boom 1"),
        ("2", "w2", "boom 2"),
        ("3", "w3", "completed"),
    ]
    assert all(re.fullmatch(r"\d+\.\ds", r[2]) for r in rows), rows  # how long each took


def test_the_attempt_running_now_says_so(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    job_id = _attempted(url, ["retryable"], running=True)
    rows = _rows(client.get(f"{D}/jobs/{job_id}", headers=READER).text)
    assert [(r[0], r[3], r[4]) for r in rows] == [("1", "w1", "boom 1"), ("2", "w2", "running")]
    assert rows[1][2].endswith(" so far")


def test_a_job_not_attempted_yet_says_so(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())

    async def insert() -> int:
        store = await SqlStore.open(url)
        try:
            [inserted] = await store.job_insert([send_job()])
            return inserted.id
        finally:
            await store.close()

    job_id = asyncio.run(insert())
    page = client.get(f"{D}/jobs/{job_id}", headers=READER).text
    assert "<h2>Attempts (0)</h2>" in page and "Not attempted yet." in page
