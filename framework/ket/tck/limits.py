"""Fleet-wide limits (JobClaim.limits): a claim starts a job only when its concurrency key has
a free place among the running attempts and its rate key a start left within its period, and
the queue's own limits allow; held jobs stay where they are, spend no attempt, and never hold up
other keys; replicas count the same attempts; a rescue and an attempt's end give the place back,
and an end wakes the queue's waiters.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from ket.store.contract import JobStore, PushStore
from ket.store.types import (
    EXPIRED,
    ClaimedJob,
    ClaimLimits,
    JobClaim,
    JobLimits,
    NewJob,
    Rate,
)
from ket.tck.arrange import fresh_queue, get, insert, insert_one, queryable, quiet, settle
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_concurrency_limit_per_key_starts_one_per_key_and_the_next_when_one_ends",
    "test_a_held_key_never_holds_up_the_keys_behind_it",
    "test_a_key_at_its_rate_never_holds_up_the_keys_behind_it",
    "test_a_queue_s_own_limits_count_all_its_jobs",
    "test_a_rate_limit_starts_at_most_its_limit_in_any_span_of_its_period",
    "test_a_rescue_gives_the_place_back_and_not_before",
    "test_an_attempt_s_end_under_a_concurrency_limit_wakes_the_queue_s_waiters",
    "test_expired_jobs_are_discarded_by_a_limited_claim_too",
    "test_replicas_count_the_same_running_attempts",
    "test_stats_count_the_due_jobs_a_limit_holds_back",
]

JOB = "kit.limited"
LEASE = 30.0


def _key(*values: object) -> str:
    return f"{JOB}|{json.dumps(list(values), separators=(',', ':'))}"


def _job(queue: str, customer: str | None = None, **fields: object) -> NewJob:
    key = None if customer is None else _key(customer)
    return NewJob(
        name=JOB,
        queue=queue,
        payload={"customer": customer},
        concurrency_key=fields.pop("concurrency_key", key),  # type: ignore[arg-type]
        rate_key=fields.pop("rate_key", None),  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


async def _claim(
    store: JobStore, queue: str, limits: ClaimLimits, limit: int = 10
) -> list[ClaimedJob]:
    return await store.job_claim(
        JobClaim(queue=queue, limit=limit, worker_id="kit", lease_seconds=LEASE, limits=limits)
    )


def _per_key(n: int) -> ClaimLimits:
    return ClaimLimits(jobs={JOB: JobLimits(concurrency=n)})


@tck_test
async def test_a_concurrency_limit_per_key_starts_one_per_key_and_the_next_when_one_ends(
    t: Tck,
) -> None:
    queue = fresh_queue("per-key")
    a1, a2, b1 = await insert(t.store, _job(queue, "a"), _job(queue, "a"), _job(queue, "b"))
    first = await _claim(t.store, queue, _per_key(1))
    assert sorted(c.id for c in first) == [a1, b1]
    assert await _claim(t.store, queue, _per_key(1)) == []
    held = await get(t, a2)
    assert (held.state, held.attempt) == ("available", 0)  # waits, spends nothing
    running_a = next(c for c in first if c.id == a1)
    await settle(t.store, running_a, "completed")
    assert [c.id for c in await _claim(t.store, queue, _per_key(1))] == [a2]


@tck_test
async def test_a_held_key_never_holds_up_the_keys_behind_it(t: Tck) -> None:
    queue = fresh_queue("hol")
    ahead = await insert(t.store, *[_job(queue, "busy") for _ in range(30)])
    behind = await insert_one(t.store, _job(queue, "other"))
    plain = await insert_one(t.store, _job(queue, None, concurrency_key=None))
    assert [c.id for c in await _claim(t.store, queue, _per_key(1), limit=1)] == [ahead[0]]
    # the next claims of one job each pass over the 29 held ones
    assert [c.id for c in await _claim(t.store, queue, _per_key(1), limit=1)] == [behind]
    assert [c.id for c in await _claim(t.store, queue, _per_key(1), limit=1)] == [plain]
    assert await _claim(t.store, queue, _per_key(1)) == []


@tck_test
async def test_a_key_at_its_rate_never_holds_up_the_keys_behind_it(t: Tck) -> None:
    queue = fresh_queue("rate-hol")
    limits = ClaimLimits(jobs={JOB: JobLimits(rate=Rate(limit=1, period_seconds=60))})
    ahead = await insert(
        t.store, *[_job(queue, "p", concurrency_key=None, rate_key=_key("p")) for _ in range(30)]
    )
    behind = [
        await insert_one(t.store, _job(queue, k, concurrency_key=None, rate_key=_key(k)))
        for k in ("q", "r")
    ]
    assert [c.id for c in await _claim(t.store, queue, limits, limit=1)] == [ahead[0]]
    # p's 29 others wait for its period; claims of one job each pass over them, key by key
    assert [c.id for c in await _claim(t.store, queue, limits, limit=1)] == [behind[0]]
    assert [c.id for c in await _claim(t.store, queue, limits, limit=1)] == [behind[1]]
    assert await _claim(t.store, queue, limits) == []
    t.clock.advance(seconds=67)  # p's start left the period (and its tenth)
    assert [c.id for c in await _claim(t.store, queue, limits)] == [ahead[1]]


@tck_test
async def test_replicas_count_the_same_running_attempts(t: Tck) -> None:
    queue = fresh_queue("replicas")
    replicas = [t.store, await t.replica(), await t.replica()]
    await insert(t.store, *[_job(queue, "shared") for _ in range(12)])
    claims = await asyncio.gather(
        *[_claim(store, queue, _per_key(2), limit=5) for store in replicas for _ in range(3)]
    )
    assert sum(len(c) for c in claims) == 2, claims


@tck_test
async def test_a_rescue_gives_the_place_back_and_not_before(t: Tck) -> None:
    queue = fresh_queue("rescue")
    first, second = await insert(t.store, _job(queue, "k"), _job(queue, "k"))
    [running] = await _claim(t.store, queue, _per_key(1))
    assert running.id == first
    t.clock.advance(seconds=LEASE - 1)
    assert await t.store.job_rescue() == []
    assert await _claim(t.store, queue, _per_key(1)) == []  # its worker may still run it
    t.clock.advance(seconds=2)
    assert [r.id for r in await t.store.job_rescue()] == [first]
    again = await _claim(t.store, queue, _per_key(1))
    assert [c.id for c in again] == [second]  # due before the rescued one, due now
    assert (await get(t, first)).state == "retryable"


@tck_test
async def test_a_rate_limit_starts_at_most_its_limit_in_any_span_of_its_period(t: Tck) -> None:
    queue = fresh_queue("rate")
    limits = ClaimLimits(jobs={JOB: JobLimits(rate=Rate(limit=3, period_seconds=10))})
    key = _key("p")
    await insert(t.store, *[_job(queue, "p", concurrency_key=None, rate_key=key) for _ in range(7)])
    other = await insert_one(t.store, _job(queue, "q", concurrency_key=None, rate_key=_key("q")))
    assert len(await _claim(t.store, queue, limits, limit=2)) == 2
    t.clock.advance(seconds=4)
    first = await _claim(t.store, queue, limits)
    assert len(first) == 2 and other in [c.id for c in first]  # one more of p, and q's
    t.clock.advance(seconds=5)
    assert await _claim(t.store, queue, limits) == []  # 3 of p within the last 9 s
    t.clock.advance(seconds=1.5)  # starts count until their tenth of the period left it
    t.clock.advance(seconds=1)  # the first two left the period; the third has not
    assert len(await _claim(t.store, queue, limits)) == 2
    assert await _claim(t.store, queue, limits) == []


@tck_test
async def test_a_queue_s_own_limits_count_all_its_jobs(t: Tck) -> None:
    queue = fresh_queue("queue-wide")
    limits = ClaimLimits(concurrency=2, rate=Rate(limit=3, period_seconds=60))
    await insert(t.store, *[_job(queue, f"c{i}", concurrency_key=f"{JOB}|[]") for i in range(5)])
    running = await _claim(t.store, queue, limits)
    assert len(running) == 2
    assert await _claim(t.store, queue, limits) == []
    for job in running:
        await settle(t.store, job, "completed")
    assert len(await _claim(t.store, queue, limits)) == 1  # the rate's third start
    assert await _claim(t.store, queue, limits) == []


@tck_test
async def test_expired_jobs_are_discarded_by_a_limited_claim_too(t: Tck) -> None:
    queue = fresh_queue("limited-expiry")
    late = await insert_one(t.store, _job(queue, "k", expires_in_seconds=5))
    t.clock.advance(seconds=6)
    fresh = await insert_one(t.store, _job(queue, "k"))
    assert [c.id for c in await _claim(t.store, queue, _per_key(1))] == [fresh]
    record = await get(t, late)
    assert record.state == "discarded" and [e.error for e in record.errors] == [EXPIRED]


@tck_test
async def test_an_attempt_s_end_under_a_concurrency_limit_wakes_the_queue_s_waiters(
    t: Tck,
) -> None:
    store = t.require(PushStore)  # type: ignore[type-abstract]
    queue = fresh_queue("woken")
    await insert(t.store, _job(queue, "k"), _job(queue, "k"))
    [running] = await _claim(t.store, queue, _per_key(1))
    await quiet(store, [queue])
    waiting = asyncio.create_task(store.wait_for_jobs([queue], 10.0))
    await asyncio.sleep(0.1)
    await settle(t.store, running, "completed")
    assert await asyncio.wait_for(waiting, 5.0) is True


@tck_test
async def test_stats_count_the_due_jobs_a_limit_holds_back(t: Tck) -> None:
    queue = fresh_queue("stats")
    jobs = [_job(queue, "a"), _job(queue, "a"), _job(queue, "a"), _job(queue, "b")]
    await insert(t.store, *jobs, _job(queue, "b", run_at=t.clock.now() + timedelta(hours=1)))
    assert len(await _claim(t.store, queue, _per_key(1))) == 2  # a and b run
    stats = await queryable(t).job_stats({queue: _per_key(1)})
    assert stats.limited == {queue: 2}  # a's two others; b's next is not due
    assert stats.counts[("available", queue)] == 2
    assert (await queryable(t).job_stats()).limited == {}  # without the limits: not counted
    queue_full = ClaimLimits(concurrency=2)
    assert (await queryable(t).job_stats({queue: queue_full})).limited == {queue: 2}
