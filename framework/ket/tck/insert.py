"""Insert: initial state and defaults, round trips, bulk, validation, unique keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ket.errors import JobRejected
from ket.store.types import PAYLOAD_VERSION, Inserted, JobState, NewJob
from ket.tck.arrange import (
    after,
    arrange,
    assert_no_jobs,
    claim,
    claim_only,
    fresh_queue,
    get,
    ids,
    insert,
    insert_one,
    new_job,
)
from ket.tck.harness import EPOCH, Tck, tck_test

__all__ = [
    "test_insert_accepts_a_payload_just_under_one_mebibyte",
    "test_insert_batch_keeps_shared_values_and_each_jobs_own",
    "test_insert_bulk_of_one_thousand_jobs_in_one_call",
    "test_insert_defaults_attempt_fence_run_at_and_enqueued_at",
    "test_insert_keeps_a_past_run_at_and_makes_the_job_available",
    "test_insert_of_an_empty_list_returns_nothing_and_writes_nothing",
    "test_insert_refuses_a_bad_value_in_a_batch_of_one_job_declaration",
    "test_insert_refuses_a_datetime_object_in_the_payload",
    "test_insert_refuses_a_delay_that_is_negative_not_finite_or_given_with_a_run_at",
    "test_insert_refuses_a_naive_run_at",
    "test_insert_refuses_a_naive_tick",
    "test_insert_refuses_a_non_finite_number_in_the_payload",
    "test_insert_refuses_a_payload_over_one_mebibyte",
    "test_insert_refuses_a_payload_that_is_not_an_object",
    "test_insert_refuses_a_set_in_the_payload",
    "test_insert_refuses_a_trace_context_that_is_not_a_few_short_strings",
    "test_insert_refuses_an_empty_name",
    "test_insert_refuses_an_empty_queue",
    "test_insert_refuses_max_attempts_of_zero",
    "test_insert_refuses_priority_above_1000",
    "test_insert_refuses_priority_below_minus_1000",
    "test_insert_refuses_tags_that_are_not_a_short_list_of_strings",
    "test_insert_returns_one_result_per_job_in_order",
    "test_insert_round_trips_every_field",
    "test_insert_round_trips_nested_and_unicode_payloads",
    "test_insert_round_trips_the_trace_context_to_claim_and_record",
    "test_insert_round_trips_times_given_in_another_timezone",
    "test_insert_with_a_delay_is_due_that_long_after_the_stores_now",
    "test_insert_with_a_delay_keeps_each_jobs_own_in_a_large_batch",
    "test_insert_with_future_run_at_is_scheduled",
    "test_insert_with_run_at_equal_to_now_is_available",
    "test_jobs_without_unique_key_never_coalesce",
    "test_unique_key_coalesces_twice_in_one_batch",
    "test_unique_key_coalesces_with_available_job",
    "test_unique_key_coalesces_with_executing_job",
    "test_unique_key_coalesces_with_retryable_job",
    "test_unique_key_coalesces_with_scheduled_job",
    "test_unique_key_coalescing_leaves_the_active_job_unchanged",
    "test_unique_key_does_not_coalesce_with_cancelled_job",
    "test_unique_key_does_not_coalesce_with_completed_job",
    "test_unique_key_does_not_coalesce_with_discarded_job",
    "test_unique_key_is_per_job_name",
    "test_unique_key_is_scoped_by_name_not_by_queue",
]

MIB = 1_048_576


# -- state and defaults ---------------------------------------------------------------------------


@tck_test
async def test_insert_defaults_attempt_fence_run_at_and_enqueued_at(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job("kit.defaults"))
    record = await get(t, job_id)
    assert record.state == "available"
    assert (record.run_at, record.enqueued_at) == (EPOCH, EPOCH)
    assert (record.attempt, record.fence) == (0, 0)
    assert (record.queue, record.priority, record.max_attempts) == ("default", 0, 20)
    assert record.payload_version == PAYLOAD_VERSION
    assert (record.attempted_at, record.finished_at, record.lease_until) == (None, None, None)
    assert (record.worker_id, record.unique_key, record.company) == (None, None, None)
    assert (record.tick, record.ticks_skipped) == (None, None)
    assert record.cancel_requested is False
    assert record.errors == ()


@tck_test
async def test_insert_with_run_at_equal_to_now_is_available(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(run_at=t.clock.now()))
    assert (await get(t, job_id)).state == "available"
    assert [c.id for c in await claim(t.store)] == [job_id]


@tck_test
async def test_insert_keeps_a_past_run_at_and_makes_the_job_available(t: Tck) -> None:
    past = after(t, -3_600)
    job_id = await insert_one(t.store, new_job(run_at=past))
    record = await get(t, job_id)
    assert (record.state, record.run_at, record.enqueued_at) == ("available", past, EPOCH)


@tck_test
async def test_insert_with_future_run_at_is_scheduled(t: Tck) -> None:
    due = after(t, 1)
    job_id = await insert_one(t.store, new_job(run_at=due))
    record = await get(t, job_id)
    assert (record.state, record.run_at, record.enqueued_at) == ("scheduled", due, EPOCH)
    assert await claim(t.store) == []


@tck_test
async def test_insert_with_a_delay_is_due_that_long_after_the_stores_now(t: Tck) -> None:
    t.clock.advance(seconds=30)
    later = await insert_one(t.store, new_job(delay_seconds=90.5))
    at_once = await insert_one(t.store, new_job(delay_seconds=0))
    record = await get(t, later)
    due = EPOCH + timedelta(seconds=120.5)
    assert (record.state, record.run_at, record.enqueued_at) == ("scheduled", due, after(t, 0))
    assert (await get(t, at_once)).state == "available"
    assert [c.id for c in await claim(t.store)] == [at_once]
    t.clock.advance(seconds=90.5)
    assert [c.id for c in await claim(t.store)] == [later]


@tck_test
async def test_insert_with_a_delay_keeps_each_jobs_own_in_a_large_batch(t: Tck) -> None:
    # large enough for each store's bulk path (PostgreSQL's arrays, SQLite's own numbering)
    queue = fresh_queue("delays")
    results = await t.store.job_insert(
        [new_job(queue=queue, delay_seconds=float(n % 3)) for n in range(70)]
    )
    runs = [(await get(t, r.id)).run_at for r in results]
    assert runs == [after(t, n % 3) for n in range(70)]


@tck_test
async def test_insert_returns_one_result_per_job_in_order(t: Tck) -> None:
    names = [f"kit.order.{n}" for n in range(5)]
    results = await t.store.job_insert([new_job(name) for name in names])
    assert [r.coalesced for r in results] == [False] * 5
    assert len({r.id for r in results}) == 5
    assert [(await get(t, r.id)).name for r in results] == names


@tck_test
async def test_insert_of_an_empty_list_returns_nothing_and_writes_nothing(t: Tck) -> None:
    assert await t.store.job_insert([]) == []
    await assert_no_jobs(t)


# -- round trips ----------------------------------------------------------------------------------


NESTED_PAYLOAD: dict[str, Any] = {
    "order": {"id": "o-1", "lines": [{"sku": "A-1", "qty": 2, "price": 9.5}, {"sku": "B"}]},
    "flags": [True, False, None],
    "empty": {"list": [], "object": {}, "text": ""},
    "count": 12_345_678_901,
    "ratio": -0.125,
    "greeting": "Grüße, 世界! 🎉",
    "ключ": "значение",
    'quote"and\\slash': "line\nbreak\ttab",
}


@tck_test
async def test_insert_round_trips_nested_and_unicode_payloads(t: Tck) -> None:
    job_id = await insert_one(t.store, new_job(payload=NESTED_PAYLOAD))
    assert (await claim_only(t.store, job_id)).payload == NESTED_PAYLOAD
    assert (await get(t, job_id)).payload == NESTED_PAYLOAD


@tck_test
async def test_insert_round_trips_every_field(t: Tck) -> None:
    tick = datetime(2030, 1, 15, 11, 0, tzinfo=UTC)
    run_at = after(t, -60)
    job = NewJob(
        name="kit.fields",
        queue="reports",
        payload={"a": 1},
        payload_version=3,
        run_at=run_at,
        priority=-7,
        max_attempts=4,
        unique_key="report:2030-01-15",
        company="acme",
        tick=tick,
        ticks_skipped=2,
    )
    job_id = await insert_one(t.store, job)
    claimed = await claim_only(t.store, job_id, "reports")
    assert (claimed.name, claimed.queue, claimed.payload) == ("kit.fields", "reports", {"a": 1})
    assert (claimed.payload_version, claimed.priority, claimed.max_attempts) == (3, -7, 4)
    assert (claimed.unique_key, claimed.company) == ("report:2030-01-15", "acme")
    assert (claimed.run_at, claimed.enqueued_at) == (run_at, EPOCH)
    assert (claimed.tick, claimed.ticks_skipped) == (tick, 2)
    record = await get(t, job_id)
    assert (record.payload_version, record.priority, record.max_attempts) == (3, -7, 4)
    assert (record.unique_key, record.company) == ("report:2030-01-15", "acme")
    assert (record.tick, record.ticks_skipped) == (tick, 2)


@tck_test
async def test_insert_round_trips_times_given_in_another_timezone(t: Tck) -> None:
    plus_five = timezone(timedelta(hours=5))
    due = (t.clock.now() + timedelta(hours=1)).astimezone(plus_five)
    job_id = await insert_one(t.store, new_job(run_at=due, tick=due))
    record = await get(t, job_id)
    assert (record.state, record.run_at, record.tick) == ("scheduled", due, due)
    assert record.run_at.utcoffset() is not None


@tck_test
async def test_insert_bulk_of_one_thousand_jobs_in_one_call(t: Tck) -> None:
    jobs = [new_job("kit.bulk", queue="bulk", payload={"n": n}) for n in range(1_000)]
    results = await t.store.job_insert(jobs)
    assert len(results) == 1_000
    assert not any(r.coalesced for r in results)
    assert len({r.id for r in results}) == 1_000
    claimed = await claim(t.store, "bulk", limit=1_000)
    assert {c.id for c in claimed} == {r.id for r in results}
    by_id = {c.id: c.payload["n"] for c in claimed}
    assert [by_id[r.id] for r in results] == list(range(1_000))


def _fields(record: Any) -> tuple[Any, ...]:
    return (
        record.name,
        record.queue,
        record.state,
        record.payload,
        record.payload_version,
        record.priority,
        record.max_attempts,
        record.company,
        record.run_at,
        record.tick,
        record.ticks_skipped,
        record.tags,
        record.trace_context,
    )


@tck_test
async def test_insert_batch_keeps_shared_values_and_each_jobs_own(t: Tck) -> None:
    """A batch's jobs may share any field (the very same value, or an equal one) or differ in
    it, a missing value (None) beside given ones included: each row keeps its own."""
    tick = datetime(2030, 1, 15, 11, 0, tzinfo=UTC)
    later, earlier = after(t, 3_600), after(t, -60)
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    shared: dict[str, Any] = {
        "name": "kit.shared",
        "queue": "kit-shared",
        "payload": {"same": True},
        "payload_version": 2,
        "run_at": earlier,
        "priority": 5,
        "max_attempts": 7,
        "company": "acme",
        "tick": tick,
        "ticks_skipped": 1,
        "tags": ("nightly",),
        "trace_context": carrier,
    }
    alike = [NewJob(**shared), NewJob(**shared), NewJob(**{**shared, "payload": {"same": True}})]
    # each field differs across the batch, one job of it holding the value the others share
    differ = [
        NewJob(**shared),
        NewJob(**{**shared, "name": "kit.other", "queue": "kit-other", "payload": {"n": 1}}),
        NewJob(**{**shared, "run_at": None, "company": None, "tick": None, "priority": -3}),
        NewJob(
            **{
                **shared,
                "run_at": later,
                "ticks_skipped": None,
                "tags": (),
                "trace_context": None,
                "payload_version": 1,
                "max_attempts": 2,
            }
        ),
    ]
    batch = alike + differ
    results = await t.store.job_insert(batch)
    assert len({r.id for r in results}) == len(batch)
    now = t.clock.now()
    for job, result in zip(batch, results, strict=True):
        record = await get(t, result.id)
        state = "scheduled" if job.run_at is not None and job.run_at > now else "available"
        expected = (
            job.name,
            job.queue,
            state,
            job.payload,
            job.payload_version,
            job.priority,
            job.max_attempts,
            job.company,
            job.run_at or now,
            job.tick,
            job.ticks_skipped,
            job.tags,
            job.trace_context,
        )
        assert _fields(record) == expected, f"job {batch.index(job)} of the batch"


@tck_test
async def test_insert_accepts_a_payload_just_under_one_mebibyte(t: Tck) -> None:
    payload = {"blob": "x" * (MIB - 100)}
    job_id = await insert_one(t.store, new_job(payload=payload))
    assert (await claim_only(t.store, job_id)).payload == payload


# -- validation: one bad job refuses the batch, nothing is written --------------------------------


async def _refused(t: Tck, bad: NewJob, *mentions: str) -> None:
    """A batch with `bad` between two good jobs is refused, naming `mentions`; nothing written."""
    batch = [new_job("kit.good.before"), bad, new_job("kit.good.after")]
    with pytest.raises(JobRejected) as refusal:
        await t.store.job_insert(batch)
    for mention in mentions:
        assert mention in str(refusal.value), (mention, str(refusal.value))
    await assert_no_jobs(t, {"default", bad.queue} - {""})


@tck_test
async def test_insert_refuses_a_set_in_the_payload(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.set", payload={"tags": {"a", "b"}}), "kit.bad.set")


@tck_test
async def test_insert_refuses_a_datetime_object_in_the_payload(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.datetime", payload={"at": EPOCH}), "kit.bad.datetime")


@tck_test
async def test_insert_refuses_a_payload_that_is_not_an_object(t: Tck) -> None:
    bad = new_job("kit.bad.list", payload=[1, 2, 3])
    await _refused(t, bad, "kit.bad.list")


@tck_test
async def test_insert_refuses_a_payload_over_one_mebibyte(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.big", payload={"blob": "x" * (MIB + 1)}), "kit.bad.big")


@tck_test
async def test_insert_refuses_priority_above_1000(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.high", priority=1_001), "kit.bad.high", "1001")


@tck_test
async def test_insert_refuses_priority_below_minus_1000(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.low", priority=-1_001), "kit.bad.low", "-1001")


@tck_test
async def test_insert_refuses_max_attempts_of_zero(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.attempts", max_attempts=0), "kit.bad.attempts")


@tck_test
async def test_insert_refuses_tags_that_are_not_a_short_list_of_strings(t: Tck) -> None:
    for tags, named in (
        ("billing", "'billing'"),  # a string is not a list of tags
        (("ok", ""), "''"),
        (("a\x00b",), "'a\\x00b'"),
        (("x" * 101,), "100 characters"),
        ((7,), "7"),
        (tuple(f"t{n}" for n in range(33)), "at most 32 tags"),
    ):
        await _refused(t, new_job("kit.bad.tags", tags=tags), "kit.bad.tags", named)


@tck_test
async def test_insert_round_trips_the_trace_context_to_claim_and_record(t: Tck) -> None:
    carrier = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    traced = await insert_one(t.store, new_job(queue="kit-traced", trace_context=carrier))
    plain = await insert_one(t.store, new_job(queue="kit-traced"))
    (claimed,) = await claim(t.store, "kit-traced", limit=1)
    assert (claimed.id, claimed.trace_context) == (traced, carrier)
    assert (await get(t, traced)).trace_context == carrier
    assert (await get(t, plain)).trace_context is None


@tck_test
async def test_insert_refuses_a_trace_context_that_is_not_a_few_short_strings(t: Tck) -> None:
    for carrier in (["traceparent"], {"traceparent": 7}, {"k": "x" * 513}, {"": "v"}):
        bad = new_job("kit.bad.trace", trace_context=carrier)
        await _refused(t, bad, "kit.bad.trace", "trace_context")


@tck_test
async def test_insert_refuses_a_naive_run_at(t: Tck) -> None:
    naive = datetime(2030, 1, 15, 13, 0)
    await _refused(t, new_job("kit.bad.naive", run_at=naive), "kit.bad.naive")


@tck_test
async def test_insert_refuses_a_delay_that_is_negative_not_finite_or_given_with_a_run_at(
    t: Tck,
) -> None:
    for delay in (-1, float("nan"), float("inf"), True, "5m"):
        bad = new_job("kit.bad.delay", delay_seconds=delay)
        await _refused(t, bad, "kit.bad.delay", "delay_seconds", repr(delay))
    both = new_job("kit.bad.both", delay_seconds=5.0, run_at=after(t, 5))
    await _refused(t, both, "kit.bad.both", "run_at", "delay_seconds")


@tck_test
async def test_insert_refuses_a_naive_tick(t: Tck) -> None:
    naive = datetime(2030, 1, 15, 11, 0)
    await _refused(t, new_job("kit.bad.tick", tick=naive, ticks_skipped=0), "kit.bad.tick")


@tck_test
async def test_insert_refuses_a_non_finite_number_in_the_payload(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.nan", payload={"ratio": float("nan")}), "kit.bad.nan")


@tck_test
async def test_insert_refuses_an_empty_queue(t: Tck) -> None:
    await _refused(t, new_job("kit.bad.queue", queue=""), "kit.bad.queue")


@tck_test
async def test_insert_refuses_an_empty_name(t: Tck) -> None:
    await _refused(t, new_job(""))


@tck_test
async def test_insert_refuses_a_bad_value_in_a_batch_of_one_job_declaration(t: Tck) -> None:
    """Jobs built from one declaration share its values; one job's own bad value still counts
    (True is refused as a priority even after jobs with priority 1)."""
    good: dict[str, Any] = {"name": "kit.same", "queue": "default", "priority": 1}
    for field, value in [("priority", 5_000), ("priority", True), ("max_attempts", 0)]:
        bad = NewJob(**{**good, field: value})
        with pytest.raises(JobRejected, match=field):
            await t.store.job_insert([NewJob(**good), NewJob(**good), bad, NewJob(**good)])
    await assert_no_jobs(t)


# -- unique keys ----------------------------------------------------------------------------------


async def _coalesces_with(t: Tck, state: JobState) -> None:
    job_id = await arrange(t, state, name="kit.unique", unique_key="k-1")
    before = await get(t, job_id)
    results = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert results == [Inserted(id=job_id, coalesced=True)]
    assert await ids(t, names=("kit.unique",)) == [job_id]
    assert await get(t, job_id) == before


@tck_test
async def test_unique_key_coalesces_with_available_job(t: Tck) -> None:
    await _coalesces_with(t, "available")


@tck_test
async def test_unique_key_coalesces_with_scheduled_job(t: Tck) -> None:
    await _coalesces_with(t, "scheduled")


@tck_test
async def test_unique_key_coalesces_with_executing_job(t: Tck) -> None:
    await _coalesces_with(t, "executing")


@tck_test
async def test_unique_key_coalesces_with_retryable_job(t: Tck) -> None:
    await _coalesces_with(t, "retryable")


@tck_test
async def test_unique_key_coalescing_leaves_the_active_job_unchanged(t: Tck) -> None:
    first = new_job("kit.unique", unique_key="k-1", payload={"v": 1}, priority=5)
    (job_id,) = await insert(t.store, first)
    second = new_job("kit.unique", unique_key="k-1", payload={"v": 2}, run_at=after(t, 600))
    assert await t.store.job_insert([second]) == [Inserted(id=job_id, coalesced=True)]
    record = await get(t, job_id)
    assert (record.state, record.payload, record.priority) == ("available", {"v": 1}, 5)
    assert record.run_at == EPOCH


async def _new_row_after(t: Tck, state: JobState) -> None:
    old = await arrange(t, state, name="kit.unique", unique_key="k-1")
    (result,) = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert result.coalesced is False
    assert result.id != old
    assert sorted(await ids(t, names=("kit.unique",))) == sorted([old, result.id])
    assert (await get(t, old)).state == state
    assert (await get(t, result.id)).state == "available"


@tck_test
async def test_unique_key_does_not_coalesce_with_completed_job(t: Tck) -> None:
    await _new_row_after(t, "completed")


@tck_test
async def test_unique_key_does_not_coalesce_with_discarded_job(t: Tck) -> None:
    await _new_row_after(t, "discarded")


@tck_test
async def test_unique_key_does_not_coalesce_with_cancelled_job(t: Tck) -> None:
    await _new_row_after(t, "cancelled")


@tck_test
async def test_unique_key_is_per_job_name(t: Tck) -> None:
    results = await t.store.job_insert(
        [new_job("kit.a", unique_key="k-1"), new_job("kit.b", unique_key="k-1")]
    )
    assert [r.coalesced for r in results] == [False, False]
    assert results[0].id != results[1].id
    again = await t.store.job_insert([new_job("kit.b", unique_key="k-1")])
    assert again == [Inserted(id=results[1].id, coalesced=True)]


@tck_test
async def test_unique_key_is_scoped_by_name_not_by_queue(t: Tck) -> None:
    (job_id,) = await insert(t.store, new_job("kit.unique", queue="one", unique_key="k-1"))
    again = await t.store.job_insert([new_job("kit.unique", queue="two", unique_key="k-1")])
    assert again == [Inserted(id=job_id, coalesced=True)]
    assert await claim(t.store, "two") == []


@tck_test
async def test_unique_key_coalesces_twice_in_one_batch(t: Tck) -> None:
    results = await t.store.job_insert(
        [
            new_job("kit.unique", unique_key="k-1", payload={"n": 1}),
            new_job("kit.other"),
            new_job("kit.unique", unique_key="k-1", payload={"n": 2}),
            new_job("kit.unique", unique_key="k-2"),
        ]
    )
    first, other, second, different = results
    assert (first.coalesced, other.coalesced, different.coalesced) == (False, False, False)
    assert second == Inserted(id=first.id, coalesced=True)
    assert len({first.id, other.id, different.id}) == 3
    assert sorted(await ids(t, names=("kit.unique",))) == sorted([first.id, different.id])
    assert (await get(t, first.id)).payload == {"n": 1}


@tck_test
async def test_jobs_without_unique_key_never_coalesce(t: Tck) -> None:
    results = await t.store.job_insert([new_job("kit.same"), new_job("kit.same")])
    again = await t.store.job_insert([new_job("kit.same")])
    assert [r.coalesced for r in [*results, *again]] == [False, False, False]
    assert len({r.id for r in [*results, *again]}) == 3
