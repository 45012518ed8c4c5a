"""The sent ledger (capability SentLedger): a message key is claimed once, sent once, forever.

A transport claims a message's idempotency key before sending, confirms it after, and releases
it when the send failed. A claim that is never confirmed nor released (its sender crashed) can
be taken over once it is older than the staleness the claimer gives.
"""

from __future__ import annotations

import asyncio

import pytest

from ket.errors import StoreError
from ket.store.contract import SentLedger
from ket.tck.clock_seam import on_store_time
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_claimed_key_is_claimed_by_no_one_else_on_any_replica",
    "test_a_confirmed_key_is_never_claimed_again",
    "test_a_fresh_key_is_claimed_once",
    "test_a_released_key_can_be_claimed_again",
    "test_a_stale_claim_is_taken_over_once",
    "test_confirm_records_a_key_whose_claim_was_released_or_taken_over",
    "test_keys_are_claimed_independently",
    "test_ledger_refuses_an_empty_key_and_a_negative_staleness",
    "test_on_the_store_own_clock_a_claim_goes_stale_after_its_staleness",
    "test_only_a_confirmed_key_counts_as_sent",
    "test_release_never_forgets_a_sent_message",
    "test_replicas_racing_a_stale_claim_take_it_over_exactly_once",
    "test_replicas_racing_one_key_claim_it_exactly_once",
]

STALE = 900.0  # seconds: the staleness every claim of the kit gives


def _ledger(t: Tck) -> SentLedger:
    return t.require(SentLedger)  # type: ignore[type-abstract]


async def _claim(ledger: SentLedger, key: str = "mail:order-1") -> bool:
    return await ledger.message_claim(key, stale_after_seconds=STALE)


async def _replicas(t: Tck, count: int) -> list[SentLedger]:
    """The store under test and `count - 1` more handles on its database, as SentLedgers."""
    handles = [_ledger(t)]
    for _ in range(count - 1):
        replica = await t.replica()
        assert isinstance(replica, SentLedger), "a replica lacks the capability its store has"
        handles.append(replica)
    return handles


@tck_test
async def test_a_fresh_key_is_claimed_once(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger) is True
    assert await _claim(ledger) is False


@tck_test
async def test_keys_are_claimed_independently(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger, "mail:order-1") is True
    assert await _claim(ledger, "mail:order-2") is True
    assert await _claim(ledger, "Mail:order-1") is True  # keys are compared exactly


@tck_test
async def test_a_claimed_key_is_claimed_by_no_one_else_on_any_replica(t: Tck) -> None:
    ledger, other = await _replicas(t, 2)
    assert await _claim(ledger) is True
    assert await _claim(other) is False


@tck_test
async def test_a_confirmed_key_is_never_claimed_again(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger) is True
    await ledger.message_confirm("mail:order-1")
    assert await _claim(ledger) is False
    t.clock.advance(days=400)  # far past any staleness: a sent message stays sent
    assert await _claim(ledger) is False
    assert await ledger.message_claim("mail:order-1", stale_after_seconds=0) is False


@tck_test
async def test_a_released_key_can_be_claimed_again(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger) is True
    await ledger.message_release("mail:order-1")
    assert await _claim(ledger) is True
    assert await _claim(ledger) is False


@tck_test
async def test_release_never_forgets_a_sent_message(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger) is True
    await ledger.message_confirm("mail:order-1")
    await ledger.message_release("mail:order-1")
    await ledger.message_release("mail:never-claimed")  # nothing to release: no error
    assert await _claim(ledger) is False


@tck_test
async def test_a_stale_claim_is_taken_over_once(t: Tck) -> None:
    ledger, other = await _replicas(t, 2)
    assert await _claim(ledger) is True
    t.clock.advance(seconds=STALE - 1)
    assert await _claim(other) is False  # not stale yet: its sender may still be sending
    t.clock.advance(seconds=2)
    assert await _claim(other) is True  # older than the staleness: its sender is gone
    assert await _claim(ledger) is False  # the takeover is a fresh claim
    t.clock.advance(seconds=STALE - 1)
    assert await _claim(ledger) is False


@tck_test
async def test_confirm_records_a_key_whose_claim_was_released_or_taken_over(t: Tck) -> None:
    ledger = _ledger(t)
    await ledger.message_confirm("mail:order-1")  # never claimed, yet the message went out
    assert await _claim(ledger, "mail:order-1") is False
    assert await _claim(ledger, "mail:order-2") is True
    await ledger.message_release("mail:order-2")
    await ledger.message_confirm("mail:order-2")
    assert await _claim(ledger, "mail:order-2") is False
    await ledger.message_confirm("mail:order-2")  # confirming twice changes nothing
    assert await _claim(ledger, "mail:order-2") is False


@tck_test
async def test_ledger_refuses_an_empty_key_and_a_negative_staleness(t: Tck) -> None:
    ledger = _ledger(t)
    with pytest.raises(StoreError, match="key"):
        await ledger.message_claim("", stale_after_seconds=STALE)
    with pytest.raises(StoreError, match="stale_after_seconds"):
        await ledger.message_claim("mail:order-1", stale_after_seconds=-1)
    with pytest.raises(StoreError, match="key"):
        await ledger.message_confirm("")
    assert await _claim(ledger) is True  # nothing was written by the refused calls


@on_store_time
async def test_on_the_store_own_clock_a_claim_goes_stale_after_its_staleness(t: Tck) -> None:
    ledger = _ledger(t)
    assert await _claim(ledger) is True
    assert await _claim(ledger) is False
    await asyncio.sleep(0.05)  # real time: the store's own clock (the database's) moves on
    assert await ledger.message_claim("mail:order-1", stale_after_seconds=3600) is False
    assert await ledger.message_claim("mail:order-1", stale_after_seconds=0.01) is True


@tck_test
async def test_replicas_racing_one_key_claim_it_exactly_once(t: Tck) -> None:
    handles = await _replicas(t, 10)
    results = await asyncio.gather(*[_claim(handle) for handle in handles])
    assert sorted(results) == [False] * 9 + [True]


@tck_test
async def test_replicas_racing_a_stale_claim_take_it_over_exactly_once(t: Tck) -> None:
    handles = await _replicas(t, 10)
    assert await _claim(handles[0]) is True
    t.clock.advance(seconds=STALE + 1)
    results = await asyncio.gather(*[_claim(handle) for handle in handles])
    assert sorted(results) == [False] * 9 + [True]


@tck_test
async def test_only_a_confirmed_key_counts_as_sent(t: Tck) -> None:
    ledger = _ledger(t)
    replica = (await _replicas(t, 2))[1]
    assert await ledger.message_sent("mail:order-1") is False  # unknown
    assert await _claim(ledger) is True
    assert await replica.message_sent("mail:order-1") is False  # claimed is not sent
    await ledger.message_confirm("mail:order-1")
    assert await replica.message_sent("mail:order-1") is True
    await ledger.message_release("mail:order-1")
    assert await ledger.message_sent("mail:order-1") is True  # a sent message stays sent
    assert await ledger.message_sent("mail:order-2") is False
