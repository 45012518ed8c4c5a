"""Reruns (capability RerunStore): a finished job's work enqueued again as a new job that
remembers the job it reruns, and the finished job listing its reruns."""

from __future__ import annotations

from ket.store.contract import RerunStore
from ket.store.types import TERMINAL_STATES, JobState, NewJob, Rerun
from ket.tck.arrange import UNKNOWN_ID, arrange, claim, fresh_queue, get, ids, new_job
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_rerun_is_refused_for_a_job_that_has_not_finished",
    "test_rerun_of_a_finished_job_inserts_a_new_job_linked_to_it",
    "test_rerun_of_an_unknown_job_writes_nothing",
    "test_rerun_that_coalesces_with_an_active_job_links_nothing",
    "test_reruns_are_listed_oldest_first_and_a_plain_job_has_none",
]


def _reruns(t: Tck) -> RerunStore:
    return t.require(RerunStore)  # type: ignore[type-abstract]


def _copy(queue: str, **fields: object) -> NewJob:
    """The job a rerun inserts: the kit's job, in `queue`."""
    return new_job(queue=queue, payload={"n": 1}, **fields)  # type: ignore[arg-type]


@tck_test
async def test_rerun_of_a_finished_job_inserts_a_new_job_linked_to_it(t: Tck) -> None:
    store = _reruns(t)
    for state in TERMINAL_STATES:
        queue = fresh_queue(f"rerun-{state}")
        origin = await arrange(t, state, queue=queue, payload={"n": 1}, tags=("a",))
        reran = await store.job_rerun(Rerun(origin=origin, job=_copy(queue, tags=("a",))))
        assert (reran.origin, reran.state, reran.reason) == (origin, state, "")
        assert reran.inserted is not None and not reran.inserted.coalesced
        record = await get(t, reran.inserted.id)
        assert (record.state, record.attempt, record.rerun_of) == ("available", 0, origin)
        assert (record.payload, record.tags) == ({"n": 1}, ("a",))
        assert [c.id for c in await claim(t.store, queue)] == [reran.inserted.id]
        assert (await get(t, origin)).state == state  # the finished job stays as it was


@tck_test
async def test_rerun_is_refused_for_a_job_that_has_not_finished(t: Tck) -> None:
    store = _reruns(t)
    states: tuple[JobState, ...] = ("available", "scheduled", "executing", "retryable")
    for state in states:
        queue = fresh_queue(f"norerun-{state}")
        origin = await arrange(t, state, queue=queue)
        if state == "executing":
            await claim(t.store, queue)
        reran = await store.job_rerun(Rerun(origin=origin, job=_copy(queue)))
        assert (reran.state, reran.inserted) == (state, None), reran
        assert state in reran.reason
        assert await ids(t, queues=(queue,)) == [origin]


@tck_test
async def test_rerun_of_an_unknown_job_writes_nothing(t: Tck) -> None:
    reran = await _reruns(t).job_rerun(Rerun(origin=UNKNOWN_ID, job=_copy("default")))
    assert (reran.state, reran.inserted, reran.reason) == (None, None, "no such job")
    assert await ids(t) == []


@tck_test
async def test_rerun_that_coalesces_with_an_active_job_links_nothing(t: Tck) -> None:
    store = _reruns(t)
    queue = fresh_queue("rerun-unique")
    origin = await arrange(t, "completed", queue=queue, unique_key="k")
    holder = await arrange(t, "available", queue=queue, unique_key="k")
    reran = await store.job_rerun(Rerun(origin=origin, job=_copy(queue, unique_key="k")))
    assert reran.inserted is not None
    assert (reran.inserted.id, reran.inserted.coalesced) == (holder, True)
    assert (await get(t, holder)).rerun_of is None
    assert await store.job_reruns(origin) == []


@tck_test
async def test_reruns_are_listed_oldest_first_and_a_plain_job_has_none(t: Tck) -> None:
    store = _reruns(t)
    queue = fresh_queue("reruns")
    origin = await arrange(t, "discarded", queue=queue)
    first = await store.job_rerun(Rerun(origin=origin, job=_copy(queue)))
    second = await store.job_rerun(Rerun(origin=origin, job=_copy(queue)))
    assert first.inserted is not None and second.inserted is not None
    assert await store.job_reruns(origin) == [first.inserted.id, second.inserted.id]
    assert await store.job_reruns(first.inserted.id) == []
    assert await store.job_reruns(UNKNOWN_ID) == []
    assert (await get(t, origin)).rerun_of is None
