"""Prune: terminal jobs past retention go, oldest first, a bounded batch at a time."""

from __future__ import annotations

import pytest

from ket.errors import JobRejected
from ket.store.contract import QueryableStore
from ket.store.types import ACTIVE_STATES, JobState, Prune
from ket.tck.arrange import arrange, ids, queryable
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_prune_deletes_terminal_jobs_at_least_as_old_as_the_retention",
    "test_prune_deletes_the_oldest_first_and_respects_the_limit",
    "test_prune_keeps_terminal_jobs_younger_than_the_retention",
    "test_prune_never_deletes_active_jobs",
    "test_prune_never_deletes_active_jobs_even_when_asked_to",
    "test_prune_only_deletes_the_terminal_states_it_is_given",
    "test_prune_refuses_a_negative_retention_and_a_limit_below_one",
]

TERMINAL: tuple[JobState, ...] = ("completed", "discarded", "cancelled")


async def _gone(store: QueryableStore, job_id: int) -> bool:
    return await store.job_get(job_id) is None


@tck_test
async def test_prune_deletes_terminal_jobs_at_least_as_old_as_the_retention(t: Tck) -> None:
    store = queryable(t)
    job_ids = [await arrange(t, state) for state in TERMINAL]
    t.clock.advance(seconds=3_600)
    assert await t.store.job_prune(Prune(older_than_seconds=3_600)) == 3
    assert [await _gone(store, job_id) for job_id in job_ids] == [True, True, True]
    assert await t.store.job_prune(Prune(older_than_seconds=3_600)) == 0


@tck_test
async def test_prune_keeps_terminal_jobs_younger_than_the_retention(t: Tck) -> None:
    store = queryable(t)
    old = [await arrange(t, state) for state in TERMINAL]
    t.clock.advance(seconds=100)
    young = [await arrange(t, state) for state in TERMINAL]
    t.clock.advance(seconds=50)
    assert await t.store.job_prune(Prune(older_than_seconds=120)) == 3
    assert [await _gone(store, job_id) for job_id in old] == [True, True, True]
    assert [await _gone(store, job_id) for job_id in young] == [False, False, False]


@tck_test
async def test_prune_deletes_the_oldest_first_and_respects_the_limit(t: Tck) -> None:
    store = queryable(t)
    finished = []
    for n in range(5):
        finished.append(await arrange(t, TERMINAL[n % 3]))
        t.clock.advance(seconds=10)
    t.clock.advance(days=1)
    assert await t.store.job_prune(Prune(older_than_seconds=60, limit=2)) == 2
    assert [await _gone(store, job_id) for job_id in finished] == [True, True, False, False, False]
    assert await t.store.job_prune(Prune(older_than_seconds=60, limit=2)) == 2
    assert [await _gone(store, job_id) for job_id in finished] == [True, True, True, True, False]
    assert await t.store.job_prune(Prune(older_than_seconds=60, limit=2)) == 1
    assert await t.store.job_prune(Prune(older_than_seconds=60, limit=2)) == 0


@tck_test
async def test_prune_never_deletes_active_jobs(t: Tck) -> None:
    active = sorted([await arrange(t, state) for state in ACTIVE_STATES])
    done = await arrange(t, "completed")
    t.clock.advance(days=30)
    assert await t.store.job_prune(Prune(older_than_seconds=0)) == 1
    assert sorted(await ids(t)) == active
    assert await queryable(t).job_get(done) is None


@tck_test
async def test_prune_never_deletes_active_jobs_even_when_asked_to(t: Tck) -> None:
    active = sorted([await arrange(t, state) for state in ACTIVE_STATES])
    t.clock.advance(days=30)
    for state in ACTIVE_STATES:
        try:
            pruned = await t.store.job_prune(Prune(older_than_seconds=0, states=(state,)))
        except JobRejected:
            pruned = 0
        assert pruned == 0, state
    assert sorted(await ids(t)) == active


@tck_test
async def test_prune_only_deletes_the_terminal_states_it_is_given(t: Tck) -> None:
    store = queryable(t)
    completed, discarded, cancelled = [await arrange(t, state) for state in TERMINAL]
    t.clock.advance(days=1)
    pruned = await t.store.job_prune(Prune(older_than_seconds=0, states=("completed", "cancelled")))
    assert pruned == 2
    gone = [await _gone(store, job_id) for job_id in (completed, discarded, cancelled)]
    assert gone == [True, False, True]


@tck_test
async def test_prune_refuses_a_negative_retention_and_a_limit_below_one(t: Tck) -> None:
    done = await arrange(t, "completed")
    t.clock.advance(days=1)
    for prune in (Prune(older_than_seconds=-1), Prune(older_than_seconds=0, limit=0)):
        with pytest.raises(JobRejected):
            await t.store.job_prune(prune)
    assert await ids(t) == [done]
