"""Enqueues that arrive together commit together (ket.store.sql.gather): who goes alone, who
goes in a group, and what each caller gets when the group's insert fails."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Sequence

import pytest

from ket.errors import StoreError, StoreUnavailable
from ket.store.sql.gather import Gather, ThreadGather
from ket.store.types import Inserted, NewJob


def _run(test: Callable[[], Awaitable[None]]) -> Callable[[], None]:
    """The async test run on a loop of its own."""

    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())  # type: ignore[arg-type]

    return run


def _jobs(*names: str) -> list[NewJob]:
    return [NewJob(name=name) for name in names]


class _Database:
    """An insert that numbers jobs in arrival order, records each statement's jobs, holds each
    statement until released, and refuses any statement holding a job named `refused` (or
    loses the connection on one named `lost`)."""

    def __init__(self) -> None:
        self.statements: list[list[str]] = []
        self.written: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.lost = 0

    async def insert(self, jobs: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        names = [job.name for job in jobs]
        self.statements.append(names)
        await self.gate.wait()
        if "lost" in names:
            self.lost += 1
            raise StoreUnavailable("database error: the connection was lost")
        if "refused" in names:
            raise StoreError("database error: a check refused job 'refused'")
        first = len(self.written) + 1
        self.written.extend(names)
        return [Inserted(id=first + n, coalesced=False) for n in range(len(names))]

    def named(self, inserted: list[Inserted]) -> list[str]:
        return [self.written[row.id - 1] for row in inserted]


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def _under_way(database: _Database) -> tuple[Gather, asyncio.Future[list[Inserted]]]:
    """A gather on `database` whose first insert ("a", alone) is under way, held at the gate:
    what comes now gathers behind it."""
    database.gate.clear()
    gather = Gather(database.insert)
    first = asyncio.ensure_future(gather.insert(_jobs("a"), ["null"]))
    await _settle()
    return gather, first


@_run
async def test_a_lone_enqueue_goes_at_once_and_alone() -> None:
    database = _Database()
    gather = Gather(database.insert)
    inserted = await gather.insert(_jobs("a"), ["null"])
    assert database.named(inserted) == ["a"]
    assert database.statements == [["a"]]


@_run
async def test_enqueues_arriving_during_an_insert_go_together_as_the_next_one() -> None:
    database = _Database()
    gather, first = await _under_way(database)
    rest = [
        asyncio.ensure_future(gather.insert(_jobs(name, name + "2"), ["null", "null"]))
        for name in ("b", "c", "d")
    ]
    await _settle()
    database.gate.set()
    assert database.named(await first) == ["a"]
    for task, name in zip(rest, ("b", "c", "d"), strict=True):
        assert database.named(await task) == [name, name + "2"]  # each its own, in order
    assert database.statements == [["a"], ["b", "b2", "c", "c2", "d", "d2"]]
    await gather.close()


@_run
async def test_a_refused_group_is_tried_again_part_by_part_so_only_its_caller_fails() -> None:
    database = _Database()
    gather, first = await _under_way(database)
    calls = {n: asyncio.ensure_future(gather.insert(_jobs(n), ["null"])) for n in ("b", "refused")}
    calls["c"] = asyncio.ensure_future(gather.insert(_jobs("c"), ["null"]))
    await _settle()
    database.gate.set()
    await first
    assert database.named(await calls["b"]) == ["b"]
    assert database.named(await calls["c"]) == ["c"]
    with pytest.raises(StoreError, match="refused job 'refused'"):
        await calls["refused"]
    assert database.written == ["a", "b", "c"]
    await gather.close()


@_run
async def test_a_group_whose_outcome_is_unknown_fails_every_caller_and_is_not_tried_again() -> None:
    database = _Database()
    gather, first = await _under_way(database)
    calls = [asyncio.ensure_future(gather.insert(_jobs(n), ["null"])) for n in ("b", "lost")]
    await _settle()
    database.gate.set()
    await first
    for call in calls:
        with pytest.raises(StoreUnavailable, match="connection was lost"):
            await call
    assert database.lost == 1  # retrying each part could write "b" twice
    await gather.close()


@_run
async def test_a_caller_cancelled_in_flight_leaves_the_group_it_led_to_the_others() -> None:
    database = _Database()
    gather, first = await _under_way(database)
    second = asyncio.ensure_future(gather.insert(_jobs("b"), ["null"]))
    third = asyncio.ensure_future(gather.insert(_jobs("c"), ["null"]))
    await _settle()
    first.cancel()  # the lone insert is cut short; what gathered behind it goes on
    await _settle()
    second.cancel()  # a member gives up its wait: the group's insert goes on for the others
    database.gate.set()
    assert database.named(await third) == ["c"]
    with pytest.raises(asyncio.CancelledError):
        await second
    assert database.statements == [["a"], ["b", "c"]]
    # and the gather is free again afterwards
    assert database.named(await gather.insert(_jobs("d"), ["null"])) == ["d"]


def test_threads_enqueueing_together_share_inserts_each_getting_its_own_ids() -> None:
    statements: list[list[str]] = []
    written: list[str] = []
    lock = threading.Lock()
    started = threading.Event()
    release = threading.Event()

    def insert(jobs: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        names = [job.name for job in jobs]
        started.set()
        release.wait(5)
        with lock:
            statements.append(names)
            first = len(written) + 1
            written.extend(names)
        if "refused" in names:
            with lock:
                del written[-len(names) :]
            raise StoreError("database error: refused")
        return [Inserted(id=first + n, coalesced=False) for n in range(len(names))]

    gather = ThreadGather(insert)
    outcomes: dict[str, list[str] | str] = {}

    def produce(name: str) -> None:
        try:
            outcomes[name] = [written[row.id - 1] for row in gather.insert(_jobs(name), ["null"])]
        except StoreError as error:
            outcomes[name] = str(error)

    lone = threading.Thread(target=produce, args=("t0",))
    lone.start()
    assert started.wait(5)  # t0 is under way: the others gather behind it
    names = [f"t{n}" for n in range(1, 9)] + ["refused"]
    threads = [threading.Thread(target=produce, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    while len(gather._waiting) < len(names):  # every one of them waits for t0's insert
        threading.Event().wait(0.01)
    release.set()
    for thread in [lone, *threads]:
        thread.join(10)
    assert outcomes["t0"] == ["t0"]
    for name in names[:-1]:
        assert outcomes[name] == [name]
    assert outcomes["refused"] == "database error: refused"
    # t0 alone, then the other nine as one statement, refused, then each alone
    assert statements[0] == ["t0"]
    assert sorted(statements[1]) == sorted(names)
    assert sorted(s[0] for s in statements[2:]) == sorted(names)
    assert sorted(written) == sorted(["t0", *names[:-1]])
