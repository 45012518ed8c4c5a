"""One translation of a store's failures: StoreError passes as it is, anything else becomes one
with the original as its cause, and the memory store keeps to it."""

from __future__ import annotations

import asyncio

import pytest

from ket.errors import JobRejected, StoreError
from ket.store import JobClaim, NewJob
from ket.store.failure import describe, store_error, translated
from ket.store.memory import MemoryStore, transition


def test_a_store_error_is_returned_as_it_is() -> None:
    refusal = JobRejected("no")
    assert store_error(refusal) is refusal


def test_any_other_error_becomes_a_store_error_naming_its_type_and_first_line() -> None:
    error = store_error(ValueError("bad value\nand a long story"))
    assert type(error) is StoreError
    assert error.message == "the store failed: ValueError: bad value"


def test_describe_falls_back_to_the_type_name_without_a_message() -> None:
    assert describe(TimeoutError()) == "TimeoutError"


def test_translated_raises_the_translation_from_the_original() -> None:
    with pytest.raises(StoreError) as caught, translated():
        raise KeyError("k")
    assert isinstance(caught.value.__cause__, KeyError)


def test_translated_lets_store_errors_and_cancellation_through_untouched() -> None:
    refusal = JobRejected("no")
    with pytest.raises(JobRejected) as caught, translated():
        raise refusal
    assert caught.value is refusal and caught.value.__cause__ is None
    with pytest.raises(asyncio.CancelledError), translated():
        raise asyncio.CancelledError()


def test_a_fault_inside_the_memory_store_reaches_the_caller_as_store_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a bug in a transition")

    monkeypatch.setattr(transition, "claim", broken)  # the module the memory store calls

    async def main() -> None:
        memory = MemoryStore()
        await memory.job_insert([NewJob(name="j")])
        claim = JobClaim(queue="default", limit=1, worker_id="w", lease_seconds=30)
        with pytest.raises(StoreError, match="RuntimeError: a bug in a transition") as caught:
            await memory.job_claim(claim)
        assert isinstance(caught.value.__cause__, RuntimeError)

    asyncio.run(main())
