"""A database outage while hundreds of jobs are in flight: no job that ran to completion runs again.

Three `ket worker` processes reach PostgreSQL through the fault proxy; 400 jobs of 0.5-2 s are
claimed, then the proxy cuts them off for 20 s, longer than the 6 s lease: it refuses every
connection (a database down), or drops every byte without a word (a silent network, where a
write in flight neither fails nor answers). The jobs finish during the outage, so their outcomes
wait in the workers' settlers while their leases run out in the database. When it comes back,
the outcomes must be recorded promptly and before any rescue hands a finished job to another
attempt (issue 26); the side-effect table `fx` says how many times each handler ran, the job
table how each job ended and when.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.store import NewJob

from ..databases import drop_database
from .fleet import FaultFleet, until
from .proxy import Mode, Proxy

JOBS = 400
WORKERS = 3
SLOTS = 150  # every job claimed at once: all 400 in flight at the cut
LEASE_MS = 6_000  # runs out during the outage
OUTAGE_SECONDS = 20.0
# Within how long of the database's return every outcome is recorded: the settler tries again
# at least every second; behind a silent network, a write sent just before the return is first
# abandoned, after a third of the lease.
RECORDED_WITHIN = {"refuse": 2.0, "blackhole": 2.0 + LEASE_MS / 3_000}


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str) -> Iterator[FaultFleet]:
    name = f"ket_outage_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    made = FaultFleet(tmp_path / name, url, lease_ms=LEASE_MS, slots=SLOTS)
    try:
        yield made
    finally:
        made.stop_all()
        drop_database(postgres_url, name)


def _database_now(fleet: FaultFleet) -> datetime:
    [(now,)] = fleet.query("SELECT clock_timestamp()")
    assert isinstance(now, datetime)
    return now


@pytest.mark.parametrize("fault", ["refuse", "blackhole"])
def test_jobs_finished_during_an_outage_are_recorded_at_once_and_never_run_again(
    fleet: FaultFleet, fault: Mode
) -> None:
    with Proxy(("127.0.0.1", 5432)) as proxy:
        proxied = fleet.url.replace(":5432/", f":{proxy.port}/")
        workers = [fleet.start(KET_DATABASE_URL=proxied) for _ in range(WORKERS)]
        # each has opened the tenant's database (its first line comes before that: beside a
        # busy suite one was still opening it when the proxy cut, and had nothing to record)
        until(
            lambda: all("serving tenant default" in fleet.log_of(w) for w in workers),
            30,
            "the workers to serve",
        )
        # 0.5 to 2 s each: none is over when the proxy cuts, all are over before the lease
        # guard would abort them, so every outcome waits in a settler through the outage
        jobs = fleet.enqueue(
            [NewJob(name="app.work", payload={"ms": 500 + i * 1_500 // JOBS}) for i in range(JOBS)]
        )
        until(lambda: fleet.query("SELECT count(*) FROM fx") == [(JOBS,)], 30, "every job to start")
        proxy.set_mode(fault)
        cut = _database_now(fleet)
        time.sleep(OUTAGE_SECONDS)
        back = _database_now(fleet)
        proxy.set_mode("pass")
        until(
            lambda: (
                fleet.query(
                    "SELECT count(*) FROM ket_jobs WHERE id = ANY(%s) AND state = 'completed'", jobs
                )
                == [(JOBS,)]
            ),
            90,
            "every job to complete",
        )
        runs = dict(
            fleet.query(
                "SELECT job, count(*) FILTER (WHERE note = '') FROM fx WHERE job = ANY(%s) "
                "GROUP BY job",
                jobs,
            )
        )
        [(ended_in_outage, last_first_ended)] = fleet.query(
            "SELECT count(*) FILTER (WHERE ended > %s AND ended < %s), max(ended) FROM fx "
            "WHERE attempt = 1",
            cut,
            back,
        )
        [(recorded_by,)] = fleet.query(
            "SELECT max(finished_at) FROM ket_jobs WHERE id = ANY(%s)", jobs
        )
        logs = [fleet.log_of(w) for w in workers]
    twice = sorted(job for job, count in runs.items() if count > 1)
    late = (recorded_by - back).total_seconds() if recorded_by is not None else None
    print(
        f"{ended_in_outage} of {JOBS} handlers finished during the outage; "
        f"{len(twice)} jobs ran to completion twice; last job completed "
        f"{late} s after the database came back"
    )
    assert last_first_ended is not None and last_first_ended < back
    assert ended_in_outage > JOBS // 2  # the outage overlapped the jobs' completion
    assert sorted(runs) == sorted(jobs) and all(count >= 1 for count in runs.values())
    assert twice == [], f"{len(twice)} jobs ran to completion twice: {twice[:20]}"
    # recorded within moments of the database answering, not after a backoff grown meanwhile
    assert late is not None and late < RECORDED_WITHIN[fault], late
    for log in logs:  # each worker named the outage, and its end
        assert "recording outcomes" in log and "failed" in log, log[-3000:]
        assert "recording outcomes works again" in log, log[-3000:]
