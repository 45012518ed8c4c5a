"""Transactions (capability TransactionalStore): jobs exist if and only if the caller commits."""

from __future__ import annotations

import asyncio
import time

import pytest

from ket.errors import JobRejected
from ket.store.contract import PushStore
from ket.store.types import Inserted
from ket.tck.arrange import (
    assert_no_jobs,
    claim,
    insert_one,
    new_job,
    quiet,
    transactional,
)
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_transaction_coalesces_unique_keys_inside_it",
    "test_transaction_commit_wakes_a_waiting_worker",
    "test_transaction_jobs_exist_after_commit",
    "test_transaction_raising_rolls_back_its_jobs_and_reraises",
    "test_transaction_rejected_job_rolls_back_the_jobs_before_it",
    "test_transaction_rolled_back_unique_key_stays_free",
]


class _Boom(Exception):
    """The caller's own failure inside the transaction."""


@tck_test
async def test_transaction_jobs_exist_after_commit(t: Tck) -> None:
    store = transactional(t)
    async with store.transaction() as tx:
        first = await tx.job_insert([new_job("kit.a"), new_job("kit.b")])
        second = await tx.job_insert([new_job("kit.c")])
    inserted = [*first, *second]
    assert [r.coalesced for r in inserted] == [False, False, False]
    claimed = await claim(t.store)
    assert sorted(c.id for c in claimed) == sorted(r.id for r in inserted)
    assert sorted(c.name for c in claimed) == ["kit.a", "kit.b", "kit.c"]


@tck_test
async def test_transaction_raising_rolls_back_its_jobs_and_reraises(t: Tck) -> None:
    store = transactional(t)
    with pytest.raises(_Boom):
        async with store.transaction() as tx:
            (inserted,) = await tx.job_insert([new_job("kit.rolled.back")])
            assert inserted.coalesced is False
            raise _Boom()
    await assert_no_jobs(t)
    job_id = await insert_one(t.store)  # the store is still usable afterwards
    assert [c.id for c in await claim(t.store)] == [job_id]


@tck_test
async def test_transaction_rejected_job_rolls_back_the_jobs_before_it(t: Tck) -> None:
    store = transactional(t)
    with pytest.raises(JobRejected):
        async with store.transaction() as tx:
            await tx.job_insert([new_job("kit.good")])
            await tx.job_insert([new_job("kit.bad", priority=1_001)])
    await assert_no_jobs(t)


@tck_test
async def test_transaction_coalesces_unique_keys_inside_it(t: Tck) -> None:
    store = transactional(t)
    outside = await insert_one(t.store, new_job("kit.unique", unique_key="before"))
    async with store.transaction() as tx:
        joined = await tx.job_insert([new_job("kit.unique", unique_key="before")])
        (fresh,) = await tx.job_insert([new_job("kit.unique", unique_key="during")])
        again = await tx.job_insert([new_job("kit.unique", unique_key="during")])
    assert joined == [Inserted(id=outside, coalesced=True)]
    assert fresh.coalesced is False
    assert again == [Inserted(id=fresh.id, coalesced=True)]
    assert sorted(c.id for c in await claim(t.store)) == sorted([outside, fresh.id])


@tck_test
async def test_transaction_rolled_back_unique_key_stays_free(t: Tck) -> None:
    store = transactional(t)
    with pytest.raises(_Boom):
        async with store.transaction() as tx:
            await tx.job_insert([new_job("kit.unique", unique_key="k-1")])
            raise _Boom()
    (result,) = await t.store.job_insert([new_job("kit.unique", unique_key="k-1")])
    assert result.coalesced is False
    assert [c.id for c in await claim(t.store)] == [result.id]


@tck_test
async def test_transaction_commit_wakes_a_waiting_worker(t: Tck) -> None:
    store = transactional(t)
    if not isinstance(t.store, PushStore):
        pytest.skip(f"store {type(t.store).__name__} lacks capability PushStore")
    await quiet(t.store, ["mail"])
    waiter = asyncio.create_task(t.store.wait_for_jobs(["mail"], 5.0))
    await asyncio.sleep(0.1)  # let the waiter start listening
    async with store.transaction() as tx:
        await tx.job_insert([new_job(queue="mail")])
    committed = time.monotonic()
    assert await waiter is True
    assert time.monotonic() - committed < 2.0
