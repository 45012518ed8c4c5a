"""Errors: every store refuses the same bad calls the same way, and fails only with StoreError.

A refusal is a JobRejected raised before anything is written: a count that is not an integer in
range, a duration that is negative, not finite or past a century, an id or fence that no 64-bit
column holds, text no database can store (NUL, a lone surrogate), a number past its column, a
malformed tick claim. A database that fails (here: no connection free) raises a StoreError that
is not a JobRejected, with the database's own error as its `__cause__`; nothing else escapes.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ket.errors import JobRejected, StoreError
from ket.store.contract import JobStore, SentLedger
from ket.store.types import (
    Heartbeat,
    JobClaim,
    JobQuery,
    Lease,
    Prune,
    ScheduleState,
    Settle,
    TickClaim,
)
from ket.tck.arrange import (
    LEASE,
    WORKER,
    arrange,
    claim,
    claim_only,
    get,
    ids,
    insert,
    insert_one,
    new_job,
    pushable,
    queryable,
    settle,
    settlement,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_failing_database_raises_store_error_from_every_operation_and_the_handle_recovers",
    "test_cancel_and_retry_of_an_unknown_id_change_nothing_and_say_so",
    "test_claim_refuses_a_limit_that_is_not_an_integer_from_one_to_2_63",
    "test_ids_and_fences_that_are_not_64_bit_integers_are_refused",
    "test_leases_must_be_positive_finite_and_at_most_a_century",
    "test_listings_refuse_negative_or_oversized_limits_and_offsets",
    "test_numbers_past_their_column_are_refused",
    "test_prune_refuses_a_retention_or_limit_out_of_range",
    "test_rescue_refuses_a_limit_that_is_not_an_integer_from_one_to_2_63",
    "test_settle_refuses_a_delay_out_of_range_and_applies_none_of_the_batch",
    "test_text_no_database_can_store_is_refused",
    "test_tick_claims_refuse_naive_ticks_bad_skips_and_an_install_with_a_job",
    "test_wait_for_jobs_refuses_a_negative_or_nan_timeout",
]

TOO_BIG = 2**63  # one past the largest 64-bit integer
TOO_SMALL = -(2**63) - 1
CENTURY_AND_A_BIT = 3_200_000_000.0
BAD_COUNTS: tuple[Any, ...] = (0, -1, 1.5, True, TOO_BIG)
BAD_LEASES: tuple[Any, ...] = (0, -1, math.nan, math.inf, 1e300, CENTURY_AND_A_BIT, True)
BAD_DELAYS: tuple[Any, ...] = (-1, -0.5, math.nan, math.inf, -math.inf, 1e300, CENTURY_AND_A_BIT)
BAD_TEXT = ("nul\x00inside", "lone \ud800 surrogate")
BAD_IDS: tuple[Any, ...] = (TOO_BIG, TOO_SMALL, "7", 7.0, True, None)
BAD_PAGES: tuple[Any, ...] = (-1, TOO_BIG, 1.5, True)
BAD_RETENTIONS: tuple[Any, ...] = (-1, math.nan, math.inf, 1e300, CENTURY_AND_A_BIT, True)
BAD_TIMEOUTS: tuple[Any, ...] = (-1, -0.1, math.nan, True)


async def _refused(what: str, call: Awaitable[object]) -> None:
    """`call` (a coroutine of the store) raises JobRejected: a refusal, not some other error."""
    try:
        result = await call
    except JobRejected:
        return
    except Exception as error:
        raise AssertionError(f"{what}: raised {error!r}, not JobRejected") from error
    raise AssertionError(f"{what}: accepted, returned {result!r}")


def _claim(
    limit: Any = 10, lease: Any = LEASE, queue: Any = "default", worker: Any = WORKER
) -> JobClaim:
    return JobClaim(queue=queue, limit=limit, worker_id=worker, lease_seconds=lease)


@tck_test
async def test_claim_refuses_a_limit_that_is_not_an_integer_from_one_to_2_63(t: Tck) -> None:
    job_id = await insert_one(t.store)
    for limit in BAD_COUNTS:
        await _refused(f"claim limit {limit!r}", t.store.job_claim(_claim(limit=limit)))
    await claim_only(t.store, job_id)  # none of them took it


@tck_test
async def test_leases_must_be_positive_finite_and_at_most_a_century(t: Tck) -> None:
    job_id = await insert_one(t.store)
    for lease in BAD_LEASES:
        await _refused(f"claim lease {lease!r}", t.store.job_claim(_claim(lease=lease)))
    claimed = await claim_only(t.store, job_id)
    held = [Lease(id=job_id, fence=claimed.fence)]
    for lease in BAD_LEASES:
        for leases in (held, []):  # refused even when there is nothing to extend
            beat = Heartbeat(leases=leases, lease_seconds=lease)
            await _refused(f"heartbeat lease {lease!r}", t.store.job_heartbeat(beat))
    assert (await get(t, job_id)).lease_until == claimed.lease_until


@tck_test
async def test_settle_refuses_a_delay_out_of_range_and_applies_none_of_the_batch(t: Tck) -> None:
    first, second = await insert(t.store, new_job(), new_job())
    claimed = {c.id: c for c in await claim(t.store)}
    before = [await get(t, job_id) for job_id in (first, second)]
    good = settlement(claimed[first], "completed")
    for outcome in ("retryable", "snoozed"):
        for delay in BAD_DELAYS:
            bad = settlement(claimed[second], outcome, delay=delay)
            await _refused(f"{outcome} in {delay!r} s", t.store.job_settle([good, bad]))
    assert [await get(t, job_id) for job_id in (first, second)] == before


@tck_test
async def test_ids_and_fences_that_are_not_64_bit_integers_are_refused(t: Tck) -> None:
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    store = queryable(t)
    for bad in BAD_IDS:
        await _refused(f"cancel {bad!r}", t.store.job_cancel(bad))
        await _refused(f"retry {bad!r}", t.store.job_retry(bad))
        await _refused(f"get {bad!r}", store.job_get(bad))
        unknown = Settle(id=bad, fence=1, outcome="completed")
        await _refused(f"settle id {bad!r}", t.store.job_settle([unknown]))
        fenced = Settle(id=job_id, fence=bad, outcome="completed")
        await _refused(f"settle fence {bad!r}", t.store.job_settle([fenced]))
        for lease in (Lease(id=bad, fence=1), Lease(id=job_id, fence=bad)):
            beat = Heartbeat(leases=[lease], lease_seconds=LEASE)
            await _refused(f"heartbeat {lease!r}", t.store.job_heartbeat(beat))
    await settle(t.store, claimed, "completed")


@tck_test
async def test_cancel_and_retry_of_an_unknown_id_change_nothing_and_say_so(t: Tck) -> None:
    """An id that fits the column but names no job is an answer, not an error."""
    for unknown in (0, -1, 2**63 - 1, -(2**63)):
        for change in (await t.store.job_cancel(unknown), await t.store.job_retry(unknown)):
            assert (change.id, change.previous, change.state, change.changed) == (
                unknown,
                None,
                None,
                False,
            )
        assert await queryable(t).job_get(unknown) is None


@tck_test
async def test_rescue_refuses_a_limit_that_is_not_an_integer_from_one_to_2_63(t: Tck) -> None:
    job_id = await insert_one(t.store)
    await claim_only(t.store, job_id, lease=1)
    t.clock.advance(seconds=2)
    for limit in BAD_COUNTS:
        await _refused(f"rescue limit {limit!r}", t.store.job_rescue(limit))
    assert (await get(t, job_id)).state == "executing"


@tck_test
async def test_prune_refuses_a_retention_or_limit_out_of_range(t: Tck) -> None:
    done = await arrange(t, "completed")
    t.clock.advance(days=1)
    for older in BAD_RETENTIONS:
        prune = Prune(older_than_seconds=older)
        await _refused(f"prune older than {older!r}", t.store.job_prune(prune))
    for limit in BAD_COUNTS:
        prune = Prune(older_than_seconds=0, limit=limit)
        await _refused(f"prune limit {limit!r}", t.store.job_prune(prune))
    assert await ids(t) == [done]


@tck_test
async def test_listings_refuse_negative_or_oversized_limits_and_offsets(t: Tck) -> None:
    store = queryable(t)
    await insert_one(t.store)
    for bad in BAD_PAGES:
        for query in (JobQuery(limit=bad), JobQuery(offset=bad)):
            await _refused(f"job_list {query!r}", store.job_list(query))
    for tags in (("",), "billing", ("a\x00b",)):
        query = JobQuery(tags=tags)  # type: ignore[arg-type]
        await _refused(f"job_list {query!r}", store.job_list(query))
        await _refused(f"schedule_fires limit {bad!r}", store.schedule_fires("s", bad))
    # one value where a collection belongs would be read letter by letter: refused
    for query in (
        JobQuery(states="available"),  # type: ignore[arg-type]
        JobQuery(states=("finished",)),  # type: ignore[arg-type]
        JobQuery(queues="mail"),  # type: ignore[arg-type]
        JobQuery(queues=("",)),
        JobQuery(names=("a\x00b",)),
        JobQuery(names=["kit.a"] * 1_001),  # type: ignore[arg-type]
    ):
        await _refused(f"job_list {query!r}", store.job_list(query))
    assert await store.job_list(JobQuery(limit=0)) == []  # an empty page is a fine question
    assert await store.schedule_fires("s", 0) == []


@tck_test
async def test_wait_for_jobs_refuses_a_negative_or_nan_timeout(t: Tck) -> None:
    waiter = pushable(t)
    for timeout in BAD_TIMEOUTS:
        await _refused(f"timeout {timeout!r}", waiter.wait_for_jobs(["mail"], timeout))


@tck_test
async def test_tick_claims_refuse_naive_ticks_bad_skips_and_an_install_with_a_job(t: Tck) -> None:
    tick = t.clock.now()
    naive = tick.replace(tzinfo=None)
    held = ScheduleState(schedule_id="kit.s", fingerprint="fp", last_tick=tick)
    bad = [
        TickClaim(schedule_id="kit.s", fingerprint="fp", tick=naive, expected=None),
        TickClaim(schedule_id="kit.s", fingerprint="fp", tick=tick, expected=None, job=new_job()),
        TickClaim(schedule_id="", fingerprint="fp", tick=tick, expected=None),
        TickClaim(schedule_id="kit.s", fingerprint="", tick=tick, expected=None),
        TickClaim(schedule_id="kit.s", fingerprint="fp", tick=tick, expected=held, skipped=-1),
        TickClaim(schedule_id="kit.s", fingerprint="fp", tick=tick, expected=held, skipped=TOO_BIG),
    ]
    for tick_claim in bad:
        await _refused(repr(tick_claim), t.store.schedule_claim_tick(tick_claim))
    assert await t.store.schedule_get(["kit.s"]) == {}
    assert await ids(t) == []


@tck_test
async def test_text_no_database_can_store_is_refused(t: Tck) -> None:
    for text in BAD_TEXT:
        for job in (
            new_job(text),
            new_job(queue=text),
            new_job(unique_key=text),
            new_job(company=text),
            new_job(payload={"note": text}),
            new_job(payload={text: 1}),
            new_job(payload={"deep": [{"er": text}]}),
        ):
            await _refused(f"insert {job!r}", t.store.job_insert([job]))
        await _refused(f"claim queue {text!r}", t.store.job_claim(_claim(queue=text)))
        await _refused(f"claim worker {text!r}", t.store.job_claim(_claim(worker=text)))
        await _refused(f"schedule id {text!r}", t.store.schedule_get([text]))
        if isinstance(t.store, SentLedger):
            ledger = t.store
            await _refused(f"message key {text!r}", ledger.message_sent(text))
    assert await ids(t) == []
    # text that merely spells an escape is ordinary text, stored as given
    escaped = {"note": "\\u0000 and \\x00"}
    job_id = await insert_one(t.store, new_job(payload=escaped))
    assert (await get(t, job_id)).payload == escaped


@tck_test
async def test_numbers_past_their_column_are_refused(t: Tck) -> None:
    past: list[dict[str, Any]] = [
        {"max_attempts": 2**31},
        {"payload_version": 2**31},
        {"ticks_skipped": -1},
        {"ticks_skipped": 2**31},
        {"priority": TOO_BIG},
    ]
    for fields in past:
        job = new_job(**fields)
        await _refused(f"insert {fields}", t.store.job_insert([job]))
    assert await ids(t) == []


@tck_test
async def test_a_failing_database_raises_store_error_from_every_operation_and_the_handle_recovers(
    t: Tck,
) -> None:
    handle, outage = await t.faulty()
    job_id = await insert_one(t.store)
    claimed = await claim_only(t.store, job_id)
    tick = t.clock.now()
    operations: dict[str, Callable[[JobStore], Awaitable[object]]] = {
        "job_insert": lambda s: s.job_insert([new_job()]),
        "job_claim": lambda s: claim(s),
        "job_settle": lambda s: s.job_settle([settlement(claimed, "completed")]),
        "job_heartbeat": lambda s: s.job_heartbeat(
            Heartbeat(leases=[Lease(id=job_id, fence=claimed.fence)], lease_seconds=LEASE)
        ),
        "job_rescue": lambda s: s.job_rescue(),
        "job_grace": lambda s: s.job_grace(LEASE),
        "job_cancel": lambda s: s.job_cancel(job_id),
        "job_retry": lambda s: s.job_retry(job_id),
        "job_prune": lambda s: s.job_prune(Prune(older_than_seconds=0)),
        "schedule_get": lambda s: s.schedule_get(["kit.s"]),
        "schedule_claim_tick": lambda s: s.schedule_claim_tick(
            TickClaim(schedule_id="kit.s", fingerprint="fp", tick=tick, expected=None)
        ),
    }
    async with outage():
        for name, operation in operations.items():
            with pytest.raises(StoreError) as caught:
                await operation(handle)
            failure = caught.value
            assert not isinstance(failure, JobRejected), f"{name}: a failure is not a refusal"
            assert failure.__cause__ is not None, f"{name}: {failure} hides its cause"
    # nothing was written meanwhile, and the same handle works again
    assert await t.store.schedule_get(["kit.s"]) == {}
    assert await ids(t) == [job_id]
    await settle(handle, claimed, "completed")
    assert (await get(t, job_id)).state == "completed"
