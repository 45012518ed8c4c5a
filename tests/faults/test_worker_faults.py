"""`ket worker` processes under real faults on a real PostgreSQL.

Each test injects one fault (a signal, a network partition, an exhausted pool, a terminated
backend, a database that refuses connections, a poisonous handler outcome) and asserts from the
job table and the side-effect log: nothing lost, no overlap inside one process, attempts of a
partitioned worker ended before their lease, the worker still serving afterwards, and a log line
naming the failure.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ket.store import NewJob

from ..databases import drop_database
from .fleet import FaultFleet, until
from .proxy import Proxy

Make = Callable[..., FaultFleet]


@pytest.fixture
def make_fleet(tmp_path: Path, postgres_url: str) -> Iterator[Make]:
    made: list[tuple[FaultFleet, str]] = []

    def make(*, lease_ms: int = 3_000, slots: int = 4) -> FaultFleet:
        name = f"ket_fault_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
        fleet = FaultFleet(tmp_path / name, url, lease_ms=lease_ms, slots=slots)
        made.append((fleet, name))
        return fleet

    yield make
    for fleet, name in made:
        fleet.stop_all()
        for log in fleet.logs:  # no error may go unreported, nor be reported as a stray task's
            assert "exception was never retrieved" not in log.read_text(), log.read_text()
        drop_database(postgres_url, name)


def _work(ms: int) -> NewJob:
    return NewJob(name="app.work", payload={"ms": ms})


def test_a_worker_stopped_past_its_lease_gives_its_attempt_up_when_it_resumes(
    make_fleet: Make,
) -> None:
    fleet = make_fleet(lease_ms=2_000)
    [job] = fleet.enqueue([_work(60_000)])
    frozen = fleet.start()
    until(lambda: len(fleet.attempts(job)) == 1, 30, "the first attempt to start")
    frozen.send_signal(signal.SIGSTOP)
    rescuer = fleet.start()
    until(lambda: fleet.state(job) == "completed", 60, "the rescued job to complete elsewhere")
    frozen.send_signal(signal.SIGCONT)
    # once it runs again, the frozen worker learns its lease is gone and ends its attempt
    until(lambda: fleet.attempts(job)[0][3] is not None, 20, "the frozen attempt to end")
    first, *rest = fleet.attempts(job)
    assert first[1] == frozen.pid and first[4] == "lease lost"
    assert [a[1] for a in rest] == [rescuer.pid]
    assert fleet.state(job) == "completed"  # the frozen worker's late outcome changed nothing
    until(lambda: "lease" in fleet.log_of(frozen), 10, "a log line about the lost lease")
    # and it still serves
    rescuer.send_signal(signal.SIGTERM)
    rescuer.wait(timeout=20)
    [later] = fleet.enqueue([_work(10)])
    until(lambda: fleet.state(later) == "completed", 30, "the resumed worker to serve again")
    assert fleet.attempts(later)[0][1] == frozen.pid


def test_a_partitioned_worker_ends_its_attempt_before_its_lease_and_serves_again(
    make_fleet: Make,
) -> None:
    fleet = make_fleet(lease_ms=3_000)
    with Proxy(("127.0.0.1", 5432)) as proxy:
        proxied = fleet.url.replace(":5432/", f":{proxy.port}/")
        cut = fleet.start(KET_DATABASE_URL=proxied)
        [job] = fleet.enqueue([_work(20_000)])
        until(lambda: len(fleet.attempts(job)) == 1, 30, "the attempt to start")
        [(claimed_until,)] = fleet.query("SELECT lease_until FROM ket_jobs WHERE id = %s", job)
        proxy.set_mode("blackhole")
        cut_at = time.monotonic()
        until(lambda: fleet.attempts(job)[0][3] is not None, 15, "the cut-off attempt to end")
        _, _, _, ended, note = fleet.attempts(job)[0]
        assert note == "lease lost"
        # it ended before the lease that another worker's rescuer goes by could expire
        [(lease_until,)] = fleet.query("SELECT lease_until FROM ket_jobs WHERE id = %s", job)
        assert ended is not None and ended < max(lease_until, claimed_until)
        rescuer = fleet.start()
        until(lambda: fleet.state(job) == "completed", 60, "the job to be rescued and run")
        assert time.monotonic() - cut_at < 60
        rescuer.send_signal(signal.SIGTERM)
        rescuer.wait(timeout=20)
        proxy.set_mode("refuse")
        time.sleep(1.0)
        proxy.set_mode("pass")
        [later] = fleet.enqueue([_work(10)])
        until(lambda: fleet.state(later) == "completed", 60, "the reconnected worker to serve")
        assert fleet.attempts(later)[0][1] == cut.pid
        log = fleet.log_of(cut)
        assert "heartbeats are failing" in log
        assert "claiming resumes" in log
        fleet.assert_no_overlap_within_a_process(job)


def test_poisonous_outcomes_are_recorded_and_never_hold_up_other_jobs(make_fleet: Make) -> None:
    fleet = make_fleet()
    kinds = ["surrogate", "nul", "huge", "retry_inf", "retry_nan", "retry_1e30", "unprintable"]
    poison = fleet.enqueue([NewJob(name="app.poison", payload={"kind": k}) for k in kinds])
    [broken_backoff] = fleet.enqueue(
        [NewJob(name="app.poison_backoff", payload={"kind": "backoff"})]
    )
    plain = fleet.enqueue([_work(1) for _ in range(20)])
    worker = fleet.start()
    until(
        lambda: all(fleet.state(j) == "completed" for j in plain), 60, "the plain jobs to complete"
    )
    every = [*poison, broken_backoff]
    until(
        lambda: all(fleet.state(j) in ("retryable", "discarded") for j in every),
        30,
        "every poisonous job to have its failure recorded",
    )
    errors = dict(
        fleet.query(
            "SELECT job_id, error FROM ket_job_errors WHERE job_id = ANY(%s) AND attempt = 1",
            every,
        )
    )
    texts = dict(zip([*kinds, "backoff"], [errors[j] for j in every], strict=True))
    assert "\\udcff" in texts["surrogate"]
    assert "\\x00" in texts["nul"] and "\x00" not in texts["nul"]
    assert "more characters cut" in texts["huge"] and len(texts["huge"]) < 10_000
    assert "finite" in texts["retry_inf"] and "finite" in texts["retry_nan"]
    assert texts["unprintable"].startswith("Unprintable (its message could not be read")
    # Retry(1e30) and a backoff of 1e300 s are clamped, not refused: due in the documented 30 days
    for clamped in (poison[kinds.index("retry_1e30")], broken_backoff):
        [(state, days)] = fleet.query(
            "SELECT state, extract(epoch FROM run_at - now()) / 86400 FROM ket_jobs WHERE id = %s",
            clamped,
        )
        assert state == "retryable" and 29 < float(days) <= 30
    assert worker.poll() is None


def test_a_timed_out_plain_handler_cannot_write_late_nor_overlap_its_retry(
    make_fleet: Make,
) -> None:
    fleet = make_fleet()
    [job] = fleet.enqueue([NewJob(name="app.late", payload={"ms": 3_000})])
    worker = fleet.start()
    until(lambda: len(fleet.attempts(job)) >= 2, 60, "the retry after the timeout")
    until(lambda: all(a[3] is not None for a in fleet.attempts(job)[:2]), 30, "both to end")
    first, second = fleet.attempts(job)[:2]
    assert first[4] == "Aborted"  # its late ctx.db write was refused
    assert fleet.query("SELECT count(*) FROM m_app_mark WHERE attempt = 1") == [(0,)]
    assert first[3] is not None and first[3] <= second[2]  # the retry began after it returned
    fleet.assert_no_overlap_within_a_process(job)
    until(lambda: "ignores its abort" in fleet.log_of(worker), 10, "the overrun warning")


def test_a_second_sigterm_ends_the_process_despite_a_stuck_thread(make_fleet: Make) -> None:
    fleet = make_fleet()
    [job] = fleet.enqueue([NewJob(name="app.stuck")])
    worker = fleet.start()
    until(lambda: len(fleet.attempts(job)) == 1, 30, "the stuck job to start")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    second = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=10)
    assert time.monotonic() - second < 2.0
    assert worker.returncode == 1
    assert fleet.state(job) == "available"  # handed back, not left to its lease


def test_pool_exhaustion_is_logged_and_the_worker_goes_on(make_fleet: Make) -> None:
    fleet = make_fleet(slots=4)
    # every job holds its transaction's connection and then some: more than the pool has
    held = fleet.enqueue([NewJob(name="app.hold", payload={"ms": 6_000}) for _ in range(4)])
    worker = fleet.start(KET_POOL_TIMEOUT_S="1")
    until(lambda: "no database connection free" in fleet.log_of(worker), 30, "the log line")
    until(
        lambda: all(fleet.state(j) in ("completed", "retryable", "available") for j in held),
        60,
        "the held jobs to be recorded",
    )
    [later] = fleet.enqueue([_work(10)])
    until(lambda: fleet.state(later) == "completed", 60, "the worker to serve afterwards")
    assert worker.poll() is None


def test_a_database_that_refuses_connections_for_a_while_loses_nothing(
    make_fleet: Make, postgres_url: str
) -> None:
    fleet = make_fleet()
    worker = fleet.start()
    name = fleet.url.rsplit("/", 1)[1]
    first = fleet.enqueue([_work(10) for _ in range(10)])
    until(lambda: all(fleet.state(j) == "completed" for j in first), 30, "the first jobs")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        time.sleep(4)
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
        )
    later = fleet.enqueue([_work(10) for _ in range(10)])
    until(lambda: all(fleet.state(j) == "completed" for j in later), 60, "the later jobs")
    assert worker.poll() is None
    log = fleet.log_of(worker)
    assert "failed" in log and "works again" in log


def test_terminated_registry_and_listener_connections_are_survived(
    make_fleet: Make, postgres_url: str
) -> None:
    fleet = make_fleet()
    registry = fleet.url  # the registry in PostgreSQL too, as in production
    worker = fleet.start(KET_REGISTRY_URL=registry)
    [first] = fleet.enqueue([_work(10)])
    until(lambda: fleet.state(first) == "completed", 30, "the first job")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() AND application_name <> 'psql'",
            (fleet.url.rsplit("/", 1)[1],),
        ).fetchall()
    assert killed
    time.sleep(2.0)
    [later] = fleet.enqueue([_work(10)])
    until(lambda: fleet.state(later) == "completed", 30, "a job after the terminations")
    assert worker.poll() is None
