"""Query (capability QueryableStore): one job, lists, stats and the ages operators watch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from ket.errors import JobRejected
from ket.store.types import JobQuery, JobState, QueueAges
from ket.tck.arrange import (
    UNKNOWN_ID,
    arrange,
    claim,
    fresh_queue,
    get,
    insert,
    insert_one,
    new_job,
    queryable,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_job_get_of_an_unknown_id_is_none",
    "test_job_list_filters_by_state_queue_and_name",
    "test_job_list_filters_by_tags_any_one_of_them",
    "test_job_list_finds_the_jobs_of_a_unique_key_finished_ones_too",
    "test_job_list_is_newest_first",
    "test_job_list_matches_any_of_several_states_queues_or_names",
    "test_job_list_pages_with_limit_and_offset",
    "test_job_stats_count_jobs_by_state_and_queue",
    "test_job_stats_count_the_jobs_discarded_within_the_last_hour",
    "test_job_stats_of_an_empty_store",
    "test_job_stats_oldest_available_age_comes_from_the_clock",
    "test_job_stats_oldest_lease_age_comes_from_the_clock",
    "test_job_stats_tell_both_ages_per_queue",
    "test_job_tags_round_trip_through_every_insert_path",
    "test_schedule_fires_of_an_unknown_schedule_is_empty",
]


def _nonzero(counts: Mapping[tuple[JobState, str], int]) -> dict[tuple[JobState, str], int]:
    """Counts without zero entries: a store may or may not list empty (state, queue) pairs."""
    return {key: n for key, n in counts.items() if n}


@tck_test
async def test_job_get_of_an_unknown_id_is_none(t: Tck) -> None:
    store = queryable(t)
    assert await store.job_get(UNKNOWN_ID) is None
    await insert_one(t.store)
    assert await store.job_get(UNKNOWN_ID) is None


@tck_test
async def test_job_list_filters_by_state_queue_and_name(t: Tck) -> None:
    store = queryable(t)
    done_a = await arrange(t, "completed", queue="sms", name="kit.a")
    mail_a = await arrange(t, "available", queue="mail", name="kit.a")
    mail_b = await arrange(t, "scheduled", queue="mail", name="kit.b")
    sms_a = await arrange(t, "available", queue="sms", name="kit.a")

    async def listed(query: JobQuery) -> set[int]:
        return {r.id for r in await store.job_list(query)}

    assert await listed(JobQuery()) == {mail_a, mail_b, sms_a, done_a}
    assert await listed(JobQuery(states=("available",))) == {mail_a, sms_a}
    assert await listed(JobQuery(queues=("mail",))) == {mail_a, mail_b}
    assert await listed(JobQuery(names=("kit.a",))) == {mail_a, sms_a, done_a}
    every = JobQuery(states=("available",), queues=("sms",), names=("kit.a",))
    assert await listed(every) == {sms_a}
    assert await listed(JobQuery(states=("completed",), queues=("mail",))) == set()
    assert await listed(JobQuery(names=("kit.none",))) == set()
    (record,) = await store.job_list(JobQuery(states=("completed",)))
    assert (record.id, record.state, record.queue, record.name) == (
        done_a,
        "completed",
        "sms",
        "kit.a",
    )


@tck_test
async def test_job_list_matches_any_of_several_states_queues_or_names(t: Tck) -> None:
    """Several values of one filter select the jobs matching any of them; the filters still
    combine, every one must hold."""
    store = queryable(t)
    mail, sms, push = fresh_queue("mail"), fresh_queue("sms"), fresh_queue("push")
    gone = await arrange(t, "discarded", queue=mail, name="kit.a")
    stopped = await arrange(t, "cancelled", queue=sms, name="kit.b")
    done = await arrange(t, "completed", queue=push, name="kit.a")
    waiting = await arrange(t, "available", queue=sms, name="kit.c")

    async def listed(**query: Any) -> list[int]:
        return [r.id for r in await store.job_list(JobQuery(limit=100_000, **query))]

    mine = {gone, stopped, done, waiting}
    assert [i for i in await listed(states=("discarded", "cancelled")) if i in mine] == [
        stopped,
        gone,
    ]
    assert await listed(queues=(mail, sms)) == [waiting, stopped, gone]
    assert await listed(queues=(sms, push), names=("kit.a", "kit.c")) == [waiting, done]
    both = await listed(queues=(mail, sms, push), states=("cancelled", "completed"))
    assert both == [done, stopped]
    assert await listed(queues=(mail, sms), states=("discarded",)) == [gone]
    assert await listed(queues=(mail,), names=("kit.b", "kit.none")) == []


@tck_test
async def test_job_list_finds_the_jobs_of_a_unique_key_finished_ones_too(t: Tck) -> None:
    store = queryable(t)
    key = fresh_queue("key")  # a unique key no other test uses
    done = await arrange(t, "completed", unique_key=key)
    again = await arrange(t, "available", unique_key=key)  # the key is free once one finished
    other = await arrange(t, "available", unique_key=key + "-other")
    found = await store.job_list(JobQuery(unique_key=key))
    assert [r.id for r in found] == [again, done]  # newest first
    assert [r.id for r in await store.job_list(JobQuery(unique_key=key + "-other"))] == [other]
    assert await store.job_list(JobQuery(unique_key=key, states=("completed",))) == found[1:]
    with pytest.raises(JobRejected, match="a unique key must be"):
        await store.job_list(JobQuery(unique_key=""))


@tck_test
async def test_job_list_filters_by_tags_any_one_of_them(t: Tck) -> None:
    store = queryable(t)
    name = fresh_queue("tagged")  # a job name no other test uses
    both = await arrange(t, "available", name=name, tags=("billing", "eu"))
    billing = await arrange(t, "completed", name=name, tags=("billing",))
    eu = await arrange(t, "scheduled", name=name, tags=("eu", "urgent"))
    untagged = await arrange(t, "available", name=name)

    async def listed(*tags: str, **query: Any) -> set[int]:
        return {r.id for r in await store.job_list(JobQuery(names=(name,), tags=tags, **query))}

    assert await listed() == {both, billing, eu, untagged}
    assert await listed("billing") == {both, billing}
    assert await listed("eu") == {both, eu}
    assert await listed("eu", "billing") == {both, billing, eu}  # any of them: each once
    assert await listed("billing", "urgent") == {both, billing, eu}
    assert await listed("billing", "eu", states=("completed",)) == {billing}
    assert await listed("bill") == set()  # a tag is matched whole, never as a prefix
    assert await listed("nobody", "none") == set()


@tck_test
async def test_job_tags_round_trip_through_every_insert_path(t: Tck) -> None:
    queue = fresh_queue("tags")
    one = await insert_one(t.store, new_job(queue=queue, tags=("solo", "ünï")))
    keyed = await insert_one(t.store, new_job(queue=queue, unique_key="k", tags=("keyed",)))
    # a large batch: the stores insert those differently (arrays, numbered rows)
    batch = [new_job(queue=queue, tags=(f"n{n % 3}", "batch") if n % 2 else ()) for n in range(70)]
    many = await insert(t.store, *batch)
    assert (await get(t, one)).tags == ("solo", "ünï")
    assert (await get(t, keyed)).tags == ("keyed",)
    for n, job_id in enumerate(many):
        assert (await get(t, job_id)).tags == batch[n].tags, n
    store = queryable(t)
    batched = await store.job_list(JobQuery(queues=(queue,), tags=("n1",), limit=100))
    assert {r.id for r in batched} == {many[n] for n in range(70) if n % 2 and n % 3 == 1}


@tck_test
async def test_job_list_is_newest_first(t: Tck) -> None:
    store = queryable(t)
    job_ids = []
    for n in range(4):
        job_ids.append(await insert_one(t.store, new_job(f"kit.{n}", queue=f"q{n % 2}")))
        t.clock.advance(seconds=1)
    assert [r.id for r in await store.job_list(JobQuery())] == list(reversed(job_ids))
    in_q0 = await store.job_list(JobQuery(queues=("q0",)))
    assert [r.id for r in in_q0] == [job_ids[2], job_ids[0]]


@tck_test
async def test_job_list_pages_with_limit_and_offset(t: Tck) -> None:
    store = queryable(t)
    job_ids = []
    for _ in range(5):
        job_ids.append(await insert_one(t.store))
        t.clock.advance(seconds=1)
    newest_first = list(reversed(job_ids))

    async def page(limit: int, offset: int) -> list[int]:
        return [r.id for r in await store.job_list(JobQuery(limit=limit, offset=offset))]

    assert await page(2, 0) == newest_first[0:2]
    assert await page(2, 2) == newest_first[2:4]
    assert await page(2, 4) == newest_first[4:]
    assert await page(2, 5) == []
    assert await page(10, 1) == newest_first[1:]
    assert len(await store.job_list(JobQuery())) == 5  # the default limit (50) is not reached


@tck_test
async def test_job_stats_of_an_empty_store(t: Tck) -> None:
    stats = await queryable(t).job_stats()
    assert _nonzero(stats.counts) == {}
    assert (stats.oldest_lease_age, stats.oldest_available_age) == (None, None)


@tck_test
async def test_job_stats_count_jobs_by_state_and_queue(t: Tck) -> None:
    for state in ("scheduled", "retryable", "completed", "discarded", "cancelled"):
        await arrange(t, state, queue="sms")
    await insert(t.store, *[new_job(queue="mail") for _ in range(3)], new_job(queue="sms"))
    await claim(t.store, "mail", limit=2)
    stats = await queryable(t).job_stats()
    assert _nonzero(stats.counts) == {
        ("available", "mail"): 1,
        ("executing", "mail"): 2,
        ("available", "sms"): 1,
        ("scheduled", "sms"): 1,
        ("retryable", "sms"): 1,
        ("completed", "sms"): 1,
        ("discarded", "sms"): 1,
        ("cancelled", "sms"): 1,
    }


@tck_test
async def test_job_stats_count_the_jobs_discarded_within_the_last_hour(t: Tck) -> None:
    await arrange(t, "discarded", queue="sms")
    t.clock.advance(seconds=3_000)
    await arrange(t, "discarded", queue="sms")
    await arrange(t, "discarded", queue="mail")
    await arrange(t, "completed", queue="mail")
    stats = await queryable(t).job_stats()
    assert dict(stats.discarded_last_hour) == {"mail": 1, "sms": 2}
    t.clock.advance(seconds=700)  # the first discard is over an hour old now
    stats = await queryable(t).job_stats()
    assert dict(stats.discarded_last_hour) == {"mail": 1, "sms": 1}
    assert stats.counts[("discarded", "sms")] == 2  # still kept, and counted


@tck_test
async def test_job_stats_oldest_lease_age_comes_from_the_clock(t: Tck) -> None:
    """The oldest lease age is how long the longest-held executing job has been claimed."""
    await insert(t.store, new_job(queue="a"), new_job(queue="b"))
    assert (await queryable(t).job_stats()).oldest_lease_age is None
    await claim(t.store, "a", lease=600)
    t.clock.advance(seconds=30)
    await claim(t.store, "b", lease=600)
    t.clock.advance(seconds=15)
    assert (await queryable(t).job_stats()).oldest_lease_age == 45.0


@tck_test
async def test_job_stats_oldest_available_age_comes_from_the_clock(t: Tck) -> None:
    """The oldest available age is how long the longest-waiting available job has waited."""
    await arrange(t, "scheduled")  # waiting, but not due: not counted
    assert (await queryable(t).job_stats()).oldest_available_age is None
    oldest = await insert_one(t.store, new_job(queue="a"))
    t.clock.advance(seconds=20)
    await insert_one(t.store, new_job(queue="b"))
    t.clock.advance(seconds=5)
    assert (await queryable(t).job_stats()).oldest_available_age == 25.0
    await claim(t.store, "a")
    stats = await queryable(t).job_stats()
    assert stats.oldest_available_age == 5.0, f"job {oldest} is executing and no longer waits"


@tck_test
async def test_job_stats_tell_both_ages_per_queue(t: Tck) -> None:
    """Each queue with a due or an executing job has its own two ages (the dashboard's queues)."""
    mail, sms, later = fresh_queue("mail"), fresh_queue("sms"), fresh_queue("later")
    await insert(t.store, new_job(queue=mail), new_job(queue=mail))
    await arrange(t, "scheduled", queue=later)  # not due: no age at all
    t.clock.advance(seconds=10)
    await insert_one(t.store, new_job(queue=sms))
    t.clock.advance(seconds=5)
    await claim(t.store, mail, limit=1)
    t.clock.advance(seconds=20)
    ages = (await queryable(t).job_stats()).queue_ages
    assert {queue: ages[queue] for queue in (mail, sms) if queue in ages} == {
        mail: QueueAges(oldest_lease_age=20.0, oldest_available_age=35.0),
        sms: QueueAges(oldest_lease_age=None, oldest_available_age=25.0),
    }
    assert later not in ages


@tck_test
async def test_schedule_fires_of_an_unknown_schedule_is_empty(t: Tck) -> None:
    assert await queryable(t).schedule_fires("never.installed") == []
