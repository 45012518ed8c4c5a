"""Bulk cancel and retry while a real `ket worker` drains the same queue, on PostgreSQL.

The handler writes every attempt to a side-effect table (`fx`, see tests/faults/fleet.py): the
job, the attempt, when it started and ended, and the reason its signal was aborted, if any. From
that log and the jobs table the tests prove every job ended as if the command and the worker had
acted one after the other.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.store import ErrorInfo, JobClaim, NewJob, Settle
from ket.store.sql import SqlStore
from tests.databases import drop_database
from tests.faults.fleet import FaultFleet, until

Make = Callable[[], FaultFleet]


@pytest.fixture
def make_fleet(tmp_path: Path, postgres_url: str) -> Iterator[Make]:
    made: list[tuple[FaultFleet, str]] = []

    def make() -> FaultFleet:
        name = f"ket_bulk_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
        # a lease long enough that a loaded machine's late heartbeat does not lose it: the
        # cancel must reach the running jobs by request, not by a rescue
        fleet = FaultFleet(tmp_path / name, url, lease_ms=10_000, slots=4)
        made.append((fleet, name))
        return fleet

    yield make
    for fleet, name in made:
        fleet.stop_all()
        drop_database(postgres_url, name)


def _runs(fleet: FaultFleet) -> dict[int, list[tuple[int, object, object, str | None]]]:
    """Each job's attempts from the side-effect log: (attempt, started, ended, note)."""
    runs: dict[int, list[tuple[int, object, object, str | None]]] = {}
    for job, attempt, started, ended, note in fleet.query(
        "SELECT job, attempt, started, ended, note FROM fx ORDER BY started"
    ):
        runs.setdefault(job, []).append((attempt, started, ended, note))
    return runs


def test_bulk_cancel_racing_a_worker_leaves_each_job_completed_or_cancelled_never_both(
    make_fleet: Make,
) -> None:
    fleet = make_fleet()
    long = fleet.enqueue([NewJob(name="app.work", payload={"ms": 60_000}) for _ in range(2)])
    short = fleet.enqueue([NewJob(name="app.work", payload={"ms": 20}) for _ in range(400)])
    fleet.start()
    # the long jobs run (their cancel goes by request) while the short ones drain
    # 18 short jobs finished before the cancel: they must end completed
    finished = "SELECT count(*) FROM fx WHERE ended IS NOT NULL"
    until(lambda: fleet.query(finished)[0][0] >= 18, 60, "the worker to be under way")
    done = fleet.ket("jobs", "cancel", "--queue", "default", "--yes", "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    until(
        lambda: fleet.query("SELECT count(*) FROM ket_jobs WHERE state = 'executing'") == [(0,)],
        30,
        "the running jobs to be aborted",
    )
    fleet.stop_all()
    jobs = {
        row[0]: row[1:]
        for row in fleet.query("SELECT id, state, attempt, finished_at FROM ket_jobs")
    }
    assert sorted(jobs) == sorted(long + short)  # none lost
    runs = _runs(fleet)
    cancelled = [job for job, (state, _, _) in jobs.items() if state == "cancelled"]
    completed = [job for job, (state, _, _) in jobs.items() if state == "completed"]
    assert sorted(cancelled + completed) == sorted(jobs), {s for s, _, _ in jobs.values()}
    for job in completed:  # ran once, before the cancel reached it
        assert [(a, note) for a, _, _, note in runs[job]] == [(1, "")], (job, runs[job])
        assert jobs[job][1] == 1
    for job in cancelled:
        _, attempt, finished_at = jobs[job]
        if job not in runs:  # cancelled before its handler started: unclaimed (attempt 0),
            # or claimed and waiting for a free slot (attempt 1), then handed back cancelled
            assert attempt in (0, 1), (job, jobs[job])
            continue
        # it was running: its worker was asked to abort, and did, and nothing ran after
        assert [(a, note) for a, _, _, note in runs[job]] == [(1, "cancelled")], runs[job]
        assert attempt == 1
        assert all(started < finished_at for _, started, _, _ in runs[job])
    assert set(long) <= set(cancelled)
    assert result["changed"] >= len(cancelled) > 0
    assert len(completed) >= 18


def _discarded(url: str, count: int) -> list[int]:
    """`count` jobs that ran once and were discarded, with an error in their history."""

    async def main() -> list[int]:
        store = await SqlStore.open(url)
        try:
            jobs = [NewJob(name="app.work", payload={"ms": 10}) for _ in range(count)]
            await store.job_insert(jobs)
            claim = JobClaim(queue="default", limit=count, worker_id="seed", lease_seconds=60)
            claimed = await store.job_claim(claim)
            error = ErrorInfo(error="seeded failure")
            await store.job_settle(
                [Settle(id=c.id, fence=c.fence, outcome="discarded", error=error) for c in claimed]
            )
            return [c.id for c in claimed]
        finally:
            await store.close()

    return asyncio.run(main())


def test_bulk_retry_of_discarded_jobs_while_a_worker_drains_runs_each_once_more(
    make_fleet: Make,
) -> None:
    fleet = make_fleet()
    discarded = _discarded(fleet.url, 150)
    backlog = fleet.enqueue([NewJob(name="app.work", payload={"ms": 5}) for _ in range(300)])
    fleet.start()
    # 18 short jobs finished before the cancel: they must end completed
    finished = "SELECT count(*) FROM fx WHERE ended IS NOT NULL"
    until(lambda: fleet.query(finished)[0][0] >= 18, 60, "the worker to be under way")
    done = fleet.ket("jobs", "retry", "--state", "discarded", "--queue", "default", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("retried 150 jobs in tenant default (")
    until(
        lambda: fleet.query("SELECT count(*) FROM ket_jobs WHERE state <> 'completed'") == [(0,)],
        60,
        "every job to complete",
    )
    fleet.stop_all()
    runs = _runs(fleet)
    for job in backlog:
        assert [a for a, *_ in runs[job]] == [1], (job, runs[job])
    for job in discarded:  # its second attempt, once; its first attempt's error kept
        assert [a for a, *_ in runs[job]] == [2], (job, runs[job])
    rows = fleet.query(
        "SELECT j.id, j.attempt, count(e.id) FROM ket_jobs j "
        "LEFT JOIN ket_job_errors e ON e.job_id = j.id GROUP BY j.id, j.attempt"
    )
    assert {(attempt, errors) for job, attempt, errors in rows if job in discarded} == {(2, 1)}
    assert {(attempt, errors) for job, attempt, errors in rows if job in backlog} == {(1, 0)}
