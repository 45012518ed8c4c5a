"""Vacuum (capability VacuumStore): reclaiming dead row versions changes nothing a caller sees.

A store may answer `not_needed` when its database keeps no dead row versions (SQLite), or
`not_permitted` when its role may not vacuum; the kit's stores own their tables, so a vacuum
asked for with no threshold runs, or is not needed.
"""

from __future__ import annotations

import math

import pytest

from ket.errors import JobRejected
from ket.store.contract import VacuumStore
from ket.store.types import JOB_STATES, Vacuum
from ket.tck.arrange import arrange, claim, fresh_queue, insert, new_job, queryable, settle
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_vacuum_changes_no_job_and_no_error_history",
    "test_vacuum_is_not_due_below_its_threshold",
    "test_vacuum_keeps_due_work_claimable_in_claim_order",
    "test_vacuum_refuses_a_negative_threshold_and_a_scale_factor_out_of_range",
]

ALWAYS = Vacuum(threshold=0, scale_factor=0)


def _vacuumable(t: Tck) -> VacuumStore:
    return t.require(VacuumStore)  # type: ignore[type-abstract]


@tck_test
async def test_vacuum_changes_no_job_and_no_error_history(t: Tck) -> None:
    store, reader = _vacuumable(t), queryable(t)
    job_ids = [await arrange(t, state) for state in JOB_STATES]
    before = [await reader.job_get(job_id) for job_id in job_ids]
    assert (await store.job_vacuum(ALWAYS)).outcome in ("vacuumed", "not_needed")
    assert [await reader.job_get(job_id) for job_id in job_ids] == before


@tck_test
async def test_vacuum_keeps_due_work_claimable_in_claim_order(t: Tck) -> None:
    store = _vacuumable(t)
    queue = fresh_queue()
    first, *rest = await insert(t.store, *(new_job(queue=queue, priority=p) for p in (-1, 0, 1, 2)))
    [claimed] = await claim(t.store, queue, limit=1)
    assert claimed.id == first
    await settle(t.store, claimed, "completed")
    assert (await store.job_vacuum(ALWAYS)).outcome in ("vacuumed", "not_needed")
    assert [job.id for job in await claim(t.store, queue, limit=10)] == rest


@tck_test
async def test_vacuum_is_not_due_below_its_threshold(t: Tck) -> None:
    store = _vacuumable(t)
    await arrange(t, "completed")
    result = await store.job_vacuum(Vacuum(threshold=10**12))
    assert result.outcome in ("not_due", "not_needed"), result


@tck_test
async def test_vacuum_refuses_a_negative_threshold_and_a_scale_factor_out_of_range(t: Tck) -> None:
    store = _vacuumable(t)
    with pytest.raises(JobRejected, match=r"vacuum threshold must be an integer .* got -1"):
        await store.job_vacuum(Vacuum(threshold=-1))
    for factor in (-0.5, math.nan, 101.0):
        with pytest.raises(JobRejected, match="vacuum scale_factor must be a number"):
            await store.job_vacuum(Vacuum(scale_factor=factor))
