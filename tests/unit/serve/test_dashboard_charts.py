"""The Charts page: the per-minute counts drawn as SVG for the last hour or day, of one queue or
all, with their numbers in a table; any reader may see it, a bad range or queue is refused."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ket.serve.dashboard import chart
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.store.types import JobMinute, JobMinutes
from tests.unit.serve.conftest import Serve
from tests.unit.serve.desk import arrange, deployment, send_job

D = "/dashboard/t/default"
READER = {"Authorization": "Bearer reader"}


def _count(url: str, clock: ManualClock, times: int) -> None:
    """`times` counts, a minute apart on `clock`."""

    async def main() -> None:
        store = await SqlStore.open(url, clock=clock)
        try:
            for _ in range(times):
                assert await store.minute_record(0) is True
                clock.advance(seconds=60)
        finally:
            await store.close()

    asyncio.run(main())


def test_the_charts_show_what_was_counted_per_queue_and_range(serve: Serve, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/default.db"
    client = serve(deployment())
    now = datetime.now(UTC)
    _count(url, ManualClock(now), 1)  # counting starts before the jobs
    arrange(url, [send_job(), send_job("bob@example.com"), send_job("cy@example.com")], discard=1)
    # two counts, minutes from now: the minute and the ten minutes of the jobs are counted whole
    _count(url, ManualClock(now + timedelta(minutes=15)), 2)

    page = client.get(f"{D}/charts", headers=READER)
    assert page.status_code == 200, page.text
    text = page.text
    assert '<a href="/dashboard/t/default/charts" class="current" aria-current="page">' in text
    totals = re.search(r'<p class="totals">(.*?)</p>', text, re.S)
    assert totals is not None
    shown = re.sub(r"<[^>]+>", "", totals.group(1))
    assert shown == (
        "In the range shown: 3 enqueued, 0 completed, 0 failed and retried, 1 discarded, "
        "0 cancelled."
    )
    assert '<desc id="throughput-desc">In the range shown: 3 enqueued, 0 completed' in text
    # the lines are drawn, coloured by class; no style attribute anywhere (the CSP)
    assert re.search(r'<path class="series series-enqueued" d="M[\d. L]+"', text)
    assert "style=" not in text
    assert "Per minute, in UTC, of all queues." in text

    mail = client.get(f"{D}/charts?queue=mail", headers=READER).text
    assert "3 enqueued" in mail and "of queue mail" in mail
    default = client.get(f"{D}/charts?queue=default", headers=READER).text
    assert "0 enqueued" in default

    day = client.get(f"{D}/charts?range=day", headers=READER)
    assert day.status_code == 200
    assert "Per 10 minutes, in UTC" in day.text
    assert "3 enqueued" in day.text


def test_a_range_or_queue_the_page_does_not_offer_is_refused_naming_it(serve: Serve) -> None:
    client = serve(deployment())
    week = client.get(f"{D}/charts?range=week", headers=READER)
    assert week.status_code == 400
    assert "range &#39;week&#39; is not one the dashboard offers" in week.text
    other = client.get(f"{D}/charts?queue=nosuch", headers=READER)
    assert other.status_code == 400
    assert "queue &#39;nosuch&#39; is not one the dashboard offers" in other.text


def test_before_anything_is_counted_the_page_says_so(serve: Serve) -> None:
    client = serve(deployment())
    page = client.get(f"{D}/charts", headers=READER)
    assert page.status_code == 200
    assert "nothing is counted yet" in page.text
    assert "not counted yet" in page.text  # in the table of numbers


def test_buckets_sum_the_queues_keep_the_last_sample_and_leave_what_is_not_counted_blank() -> None:
    start = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)
    minute = timedelta(minutes=1)
    found = JobMinutes(
        minutes=(
            JobMinute(minute=start, queue="a", enqueued=2, completed=1),
            JobMinute(minute=start, queue="b", enqueued=1, available=4, oldest_available_ms=900),
            JobMinute(minute=start, queue="a", available=1, oldest_available_ms=3_000),
            JobMinute(minute=start + minute, queue="a", completed=5),
            JobMinute(minute=start + 2 * minute, queue="a", discarded=1, available=0),
        ),
        counted_until=start + 2 * minute,  # the third minute is not whole yet
    )
    rows = chart.buckets(found, None, start, minute, 3)
    assert [r.counts for r in rows] == [
        {"enqueued": 3, "completed": 1, "failed": 0, "discarded": 0, "cancelled": 0},
        {"enqueued": 0, "completed": 5, "failed": 0, "discarded": 0, "cancelled": 0},
        None,
    ]
    assert [(r.available, r.oldest_seconds) for r in rows] == [(5, 3.0), (None, None), (0, 0.0)]
    only_b = chart.buckets(found, "b", start, minute, 3)
    assert only_b[0].counts == {
        "enqueued": 1,
        "completed": 0,
        "failed": 0,
        "discarded": 0,
        "cancelled": 0,
    }

    def completed(row: chart.Bucket) -> float | None:
        return None if row.counts is None else row.counts["completed"]

    plot = chart.plot(rows, [("completed", completed)], 1)
    # 0 to 8 on the y axis (four steps of 2), the line stopping where nothing is counted
    assert [label for _, label in plot.y_ticks] == ["0", "2", "4", "6", "8"]
    assert plot.lines[0].path.count("M") == 1 and plot.lines[0].path.count("L") == 1
    sampled = chart.plot(rows, [("available", lambda r: r.available)], 1)
    assert sampled.lines[0].path.count("M") == 2  # broken where a minute had no sample
