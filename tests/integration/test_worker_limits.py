"""Fleet-wide limits kept by three real `ket worker` processes on one PostgreSQL database: a
concurrency limit of 2 per customer never exceeded, even when one worker is killed mid-run
(from each attempt's start and end, written by the handlers), other customers running beside
it, and a rate of 20 starts a second held in every span of a second (from the claims' times)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta

from ket.store import NewJob

from .test_worker_processes import Fleet, _until, fleet_factory  # noqa: F401 (a fixture)

APP = """
import asyncio, os, time, uuid
from pathlib import Path
from ket import define_deployment, define_job, define_module

RUNS = Path(os.environ["KET_TEST_RUNS"])

async def sync(ctx, input):
    # the attempt's start now, its end once it returns: a killed attempt has no end
    attempt = f"{{ctx.job.id}}.{{ctx.job.attempt}}.{{os.getpid()}}"
    name = f"{{input.customer}}.{{attempt}}.{{uuid.uuid4().hex}}"
    (RUNS / name).write_text(f"{{time.time()}}\\n")
    await asyncio.sleep(input.ms / 1000)
    with (RUNS / name).open("a") as file:
        file.write(f"{{time.time()}}\\n")

async def call(ctx, input):
    pass

app = define_module(name="app", jobs={{
    "sync": define_job(
        idempotent=True,
        input={{"customer": "string", "ms": "int"}},
        concurrency_limit={{"limit": 2, "key": ["customer"]}},
        handler=sync,
    ),
    "call": define_job(
        queue="partner",
        idempotent=True,
        input={{"n": "int"}},
        rate_limit={{"limit": 20, "period": "1s"}},
        handler=call,
    ),
}})
main = define_deployment(name="main", modules=[app], worker={{
    "queues": {{"default": 8, "partner": 8}}, "poll_min_ms": 20, "poll_max_ms": 500,
    "lease_ms": {lease_ms}, "schedule_sweep_ms": 1000, "shutdown_grace_ms": 2000,
}})
"""


def _sync(customer: str, ms: int) -> NewJob:
    return NewJob(
        name="app.sync",
        payload={"customer": customer, "ms": ms},
        concurrency_key=f'app.sync|["{customer}"]',
    )


def _most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same instant)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def test_three_workers_keep_a_concurrency_limit_per_key_through_a_kill_and_other_keys_flow(
    fleet_factory: Callable[..., Fleet],  # noqa: F811 (the fixture imported above)
) -> None:
    fleet = fleet_factory(lease_ms=3_000, app=APP)
    for _ in range(3):
        fleet.start(log_level="INFO")
    _until(
        lambda: all("serving deployment" in fleet.log_of(n) for n in range(3)),
        60,
        "three serving workers",
    )
    # customer "busy" has a backlog of 40 jobs of 150 ms at a limit of 2; 12 other customers
    # have 3 each, queued behind it
    jobs = [_sync("busy", 150) for _ in range(40)]
    jobs += [_sync(f"c{n}", 150) for n in range(12) for _ in range(3)]
    ids = fleet.enqueue(jobs)
    running = "SELECT count(DISTINCT worker_id) FROM ket_jobs WHERE attempted_at IS NOT NULL"
    _until(lambda: fleet.query(running) == [(3,)], 30, "every worker claiming")
    victim = fleet.processes[0]
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.time()
    victim.wait(10)
    done = "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
    try:
        _until(lambda: fleet.query(done) == [(len(ids),)], 120, "every job completed")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    # the customers with a job the killed worker claimed: that job waited for its lease to end
    rescued = "SELECT DISTINCT payload->>'customer' FROM ket_jobs WHERE attempt > 1"
    waited = {customer for (customer,) in fleet.query(rescued)}
    fleet.stop_all()

    by_customer: dict[str, list[tuple[float, float]]] = {}
    finished: Counter[int] = Counter()  # attempts run to their end by the surviving workers
    cut_off: Counter[int] = Counter()  # by the killed one: its settlement may not have landed
    for path in fleet.runs.iterdir():
        customer, job_id, _attempt, pid, _ = path.name.split(".")
        times = [float(line) for line in path.read_text().split()]
        # an attempt killed mid-run ran until the kill, and its place was held until rescue
        end = times[1] if len(times) == 2 else killed_at
        by_customer.setdefault(customer, []).append((times[0], end))
        if len(times) == 2:
            (cut_off if int(pid) == victim.pid else finished)[int(job_id)] += 1
    assert sorted(finished | cut_off) == sorted(ids)  # nothing lost
    # each ran to its end once on the survivors; a second end only after the killed worker's,
    # whose handler returned but whose settlement the kill cut off (at least once)
    assert all(n == 1 for n in finished.values()), finished
    assert all(n == 1 for n in cut_off.values()), cut_off
    most = {customer: _most_at_once(spans) for customer, spans in by_customer.items()}
    assert max(most.values()) <= 2, most
    assert most["busy"] == 2, most  # the limit, used
    # other customers ran beside the busy one, not after its 40 jobs
    everyone = [span for spans in by_customer.values() for span in spans]
    assert _most_at_once(everyone) > 4, _most_at_once(everyone)
    busy_starts = sorted(start for start, _ in by_customer["busy"])
    firsts = {
        c: min(s for s, _ in spans)
        for c, spans in by_customer.items()
        if c != "busy" and c not in waited
    }
    assert len(firsts) >= 6, (firsts, waited)
    late = {c: at - busy_starts[9] for c, at in firsts.items() if at > busy_starts[9]}
    assert not late, late  # every other customer started before the busy one's tenth job
    print(f"most at once: per customer {max(most.values())}, all {_most_at_once(everyone)}")


def test_three_workers_hold_a_rate_of_20_a_second_in_every_span_of_a_second(
    fleet_factory: Callable[..., Fleet],  # noqa: F811 (the fixture imported above)
) -> None:
    fleet = fleet_factory(app=APP)
    for _ in range(3):
        fleet.start(log_level="INFO")
    _until(
        lambda: all("serving deployment" in fleet.log_of(n) for n in range(3)),
        60,
        "three serving workers",
    )
    ids = fleet.enqueue(
        [
            NewJob(name="app.call", queue="partner", payload={"n": n}, rate_key="app.call|[]")
            for n in range(100)
        ]
    )
    done = "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
    try:
        _until(lambda: fleet.query(done) == [(len(ids),)], 60, "every call completed")
    except AssertionError as error:
        raise AssertionError(f"{error}\n{fleet.report()}") from None
    fleet.stop_all()
    starts: list[datetime] = []
    for (at,) in fleet.query("SELECT attempted_at FROM ket_jobs ORDER BY attempted_at"):
        assert isinstance(at, datetime)
        starts.append(at)
    second = timedelta(seconds=1)
    # every span of one second, the one that begins at each start: at most 20
    busiest = max(sum(1 for b in starts if a <= b < a + second) for a in starts)
    assert busiest <= 20, busiest
    took = (starts[-1] - starts[0]).total_seconds()
    assert took >= 4.0 - 0.05, took  # 100 starts at 20 a second: four full periods at least
    assert took < 8.0, took  # and the rate is used, not undershot by idle waits
    workers = fleet.query("SELECT count(DISTINCT worker_id) FROM ket_jobs")
    print(f"100 starts over {took:.2f} s, at most {busiest} in a second, by {workers} workers")
