"""Steps: a durable step is recorded once, under the attempt's fence, read back by later
attempts of the job, and gone with the job."""

from __future__ import annotations

import json

import pytest

from ket.errors import JobRejected
from ket.store.contract import StepStore
from ket.store.types import ClaimedJob, Prune, StepRecord
from ket.tck.arrange import (
    claim_only,
    insert_one,
    new_job,
    queryable,
    settle,
    settlement,
    take_over,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_job_s_steps_are_pruned_with_it",
    "test_a_step_of_a_lease_no_longer_held_is_not_recorded",
    "test_a_step_recorded_keeps_its_first_value",
    "test_bad_steps_are_refused_naming_the_value",
    "test_steps_are_recorded_in_order_and_read_back_by_a_later_attempt",
]


def _steps(t: Tck) -> StepStore:
    if not isinstance(t.store, StepStore):
        pytest.skip(f"store {type(t.store).__name__} lacks capability StepStore")
    return t.store


async def _executing(t: Tck) -> ClaimedJob:
    job_id = await insert_one(t.store, new_job())
    return await claim_only(t.store, job_id)


def _step(job: ClaimedJob, name: str, value: str) -> StepRecord:
    return StepRecord(id=job.id, fence=job.fence, name=name, value=value)


@tck_test
async def test_steps_are_recorded_in_order_and_read_back_by_a_later_attempt(t: Tck) -> None:
    steps = _steps(t)
    claimed = await _executing(t)
    assert await steps.job_steps(claimed.id) == {}
    assert await steps.job_step_record(_step(claimed, "reserve", '{"sku":"a","n":2}'))
    t.clock.advance(seconds=1)
    assert await steps.job_step_record(_step(claimed, "charge", '"ch_1"'))
    await t.store.job_settle([settlement(claimed, "retryable", error="mail server down")])
    t.clock.advance(seconds=3_600)
    again = await claim_only(t.store, claimed.id)
    recorded = await steps.job_steps(again.id)
    assert list(recorded) == ["reserve", "charge"]
    assert {name: json.loads(v) for name, v in recorded.items()} == {
        "reserve": {"sku": "a", "n": 2},
        "charge": "ch_1",
    }


@tck_test
async def test_a_step_of_a_lease_no_longer_held_is_not_recorded(t: Tck) -> None:
    steps = _steps(t)
    claimed = await _executing(t)
    again = await take_over(t, claimed)
    assert await steps.job_step_record(_step(claimed, "charge", '"late"')) is False
    assert await steps.job_steps(claimed.id) == {}
    assert await steps.job_step_record(_step(again, "charge", '"ch_2"'))
    await settle(t.store, again, "completed")
    assert await steps.job_step_record(_step(again, "mail", "true")) is False  # not executing
    assert await steps.job_steps(claimed.id) == {"charge": '"ch_2"'}


@tck_test
async def test_a_step_recorded_keeps_its_first_value(t: Tck) -> None:
    steps = _steps(t)
    claimed = await _executing(t)
    assert await steps.job_step_record(_step(claimed, "charge", '"first"'))
    assert await steps.job_step_record(_step(claimed, "charge", '"second"')) is False
    assert await steps.job_steps(claimed.id) == {"charge": '"first"'}


@tck_test
async def test_a_job_s_steps_are_pruned_with_it(t: Tck) -> None:
    steps = _steps(t)
    claimed = await _executing(t)
    assert await steps.job_step_record(_step(claimed, "charge", "1"))
    await settle(t.store, claimed, "completed")
    t.clock.advance(seconds=3_600)
    assert await t.store.job_prune(Prune(older_than_seconds=60, states=("completed",))) == 1
    assert await queryable(t).job_get(claimed.id) is None
    assert await steps.job_steps(claimed.id) == {}


@tck_test
async def test_bad_steps_are_refused_naming_the_value(t: Tck) -> None:
    steps = _steps(t)
    claimed = await _executing(t)
    with pytest.raises(JobRejected, match="a step's name is 1 to"):
        await steps.job_step_record(_step(claimed, "", "1"))
    with pytest.raises(JobRejected, match="step 'charge' is not JSON text"):
        await steps.job_step_record(_step(claimed, "charge", "not json"))
    with pytest.raises(JobRejected, match="over the limit of 65536 bytes"):
        await steps.job_step_record(_step(claimed, "charge", '"' + "x" * 65_536 + '"'))
    assert await steps.job_steps(claimed.id) == {}
