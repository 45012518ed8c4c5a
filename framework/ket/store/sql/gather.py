"""Enqueues that arrive together commit together (group commit in the producer).

A web application enqueues from many requests at once. Inserted one transaction each, every
enqueue pays a round trip and a commit of its own, and on PostgreSQL each commit that NOTIFYs
takes the server's one notification lock through its WAL flush: 32 producers commit one after
another, no faster than one. Here the enqueues of one store (or one synchronous client) that
arrive while an insert is under way wait for it, then go together as one statement (PostgreSQL:
one `unnested` insert; SQLite: one transaction, one sync of its log), and each caller is given
its own jobs' ids once that statement has committed.

The first enqueue goes at once, on its own: a lone producer waits for nobody. What gathers is
what arrives while an insert is in flight; when it ends, everything gathered goes as the next
one. So a group is as large as the producers' rate times a round trip, and no timer ever holds
an enqueue back.

Each caller keeps its own outcome. Its input was validated and encoded before it joined (a bad
input fails its caller alone, there); should the database refuse the group's statement, nothing
of it was written, and each caller's jobs are inserted again on their own, so that a refusal
reaches only the caller whose jobs it concerns. A failure that leaves the outcome unknown (the
connection lost during the statement) is every member's, as it would have been each one's
alone: retrying could write a job twice.

Only plain jobs gather: a unique or window key is looked up and written in statements of its
own (insert.py), and such enqueues go alone as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ket.errors import StoreUnavailable
from ket.store.types import Inserted, NewJob

Insert = Callable[[Sequence[NewJob], Sequence[str]], Awaitable[list[Inserted]]]
SyncInsert = Callable[[Sequence[NewJob], Sequence[str]], list[Inserted]]


def gathers(batch: Sequence[NewJob]) -> bool:
    """Whether `batch` may join a group: plain jobs only (no unique or window key)."""
    return all(job.unique_key is None and job.window_key is None for job in batch)


def _unknown(error: Exception) -> bool:
    """Whether the group's insert failed without the database's refusal (the connection lost
    on the way, or none to be had): it may have been written, so each member gets the error
    itself, and nothing is tried again."""
    return isinstance(error, StoreUnavailable)


@dataclass(slots=True, eq=False)
class _Part:
    """One caller's jobs in a group, and where its outcome goes."""

    jobs: Sequence[NewJob]
    payloads: Sequence[str]
    done: asyncio.Future[list[Inserted]]


class Gather:
    """Concurrent inserts of plain jobs through one async store share a statement and its
    commit (see the module's text). `insert` is the store's insert of pre-encoded jobs."""

    __slots__ = ("_flying", "_groups", "_insert", "_waiting")

    def __init__(self, insert: Insert) -> None:
        self._insert = insert
        self._flying = False
        self._waiting: list[_Part] = []
        # the groups' own tasks, kept until done (so that none is lost, and close can wait)
        self._groups: set[asyncio.Task[None]] = set()

    async def insert(self, jobs: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        """Insert `jobs` (`payloads` their encoded inputs), together with the inserts that
        arrive meanwhile; returns once they committed."""
        if not self._flying:  # nothing under way: go now, alone, in the caller's own task
            self._flying = True
            try:
                return await self._insert(jobs, payloads)
            finally:
                self._next()
        part = _Part(jobs, payloads, asyncio.get_running_loop().create_future())
        self._waiting.append(part)
        # a caller cancelled here may still have its jobs written with the group's, as a
        # caller cancelled during its own statement may
        return await part.done

    def _next(self, *, grouped: bool = False) -> None:
        """An insert ended: the parts gathered meanwhile go as one group now, in a task of its
        own (so that no caller's cancellation cuts the others' insert short).

        `grouped`: the insert that ended was a group's, whose callers were just handed their
        ids and mostly enqueue again at once. The next insert waits one turn of the loop for
        them (their wake-ups run first) and takes them with whatever gathered meanwhile, so
        that they go together again rather than the first alone and the rest behind it."""
        if grouped:
            asyncio.get_running_loop().call_soon(self._next)
            return
        parts, self._waiting = self._waiting, []
        if not parts:
            self._flying = False
            return
        group = asyncio.ensure_future(self._together(parts))
        self._groups.add(group)
        group.add_done_callback(self._groups.discard)

    async def _together(self, parts: list[_Part]) -> None:
        try:
            await self._group(parts)
        except BaseException as error:  # cancelled (the loop closing): nobody is left waiting
            for part in parts:
                _fail(part.done, error)
            raise
        finally:
            self._next(grouped=len(parts) > 1)

    async def _group(self, parts: list[_Part]) -> None:
        plan = _plan(parts, lambda part: not part.done.done())  # a cancelled caller's: none
        try:
            batch = next(plan)
            while True:
                try:
                    result: list[Inserted] | Exception = await self._insert(*batch)
                except Exception as error:
                    result = error
                batch = plan.send(result)
        except StopIteration as ended:
            outcomes: list[list[Inserted] | Exception | None] = ended.value
        for part, outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, Exception):
                _fail(part.done, outcome)
            elif outcome is not None:
                _give(part.done, outcome)

    async def close(self) -> None:
        """Wait for the groups under way (their callers wait for them too)."""
        while self._groups:
            await asyncio.gather(*self._groups, return_exceptions=True)


class _Jobs(Protocol):
    """A part of a group, as the plan reads it."""

    @property
    def jobs(self) -> Sequence[NewJob]: ...

    @property
    def payloads(self) -> Sequence[str]: ...


Batch = tuple[Sequence[NewJob], Sequence[str]]  # an insert: its jobs and their payloads
Plan = Generator[Batch, "list[Inserted] | Exception", "list[list[Inserted] | Exception | None]"]


def _plan(parts: Sequence[_Jobs], wanted: Callable[[Any], bool] = lambda part: True) -> Plan:
    """The inserts of a group, one implementation for both gathers: it yields each insert's
    jobs and payloads, is sent the inserted rows or the insert's failure, and returns each
    part's outcome (None for a part no longer `wanted`, not inserted on its own).

    All the parts as one insert; if the database refused it (nothing was written), each wanted
    part on its own, so that the refusal reaches its own caller only; if its outcome is unknown
    (StoreUnavailable: it may have been written), that failure is every part's."""
    if len(parts) > 1:
        result = yield (
            [job for part in parts for job in part.jobs],
            [text for part in parts for text in part.payloads],
        )
        if not isinstance(result, Exception):
            outcomes: list[list[Inserted] | Exception | None] = []
            start = 0
            for part in parts:  # each part its own slice, in the group's order
                end = start + len(part.jobs)
                outcomes.append(result[start:end])
                start = end
            return outcomes
        if _unknown(result):
            return [result for _ in parts]
    outcomes = []
    for part in parts:
        outcomes.append((yield (part.jobs, part.payloads)) if wanted(part) else None)
    return outcomes


def _give(done: asyncio.Future[list[Inserted]], inserted: list[Inserted]) -> None:
    if not done.done():
        done.set_result(inserted)


def _fail(done: asyncio.Future[list[Inserted]], error: BaseException) -> None:
    if not done.done():
        if isinstance(error, asyncio.CancelledError):
            done.cancel()
        else:
            done.set_exception(error)


@dataclass(slots=True, eq=False)
class _ThreadPart:
    """One thread's jobs in a group: its outcome, or the group it is to insert (it leads)."""

    jobs: Sequence[NewJob]
    payloads: Sequence[str]
    ready: threading.Event = field(default_factory=threading.Event)
    inserted: list[Inserted] | None = None
    error: BaseException | None = None
    lead: list[_ThreadPart] | None = None

    def settle(self, inserted: list[Inserted] | None, error: BaseException | None) -> None:
        self.inserted, self.error = inserted, error
        self.ready.set()


class ThreadGather:
    """Gather for a synchronous client used from many threads: as Gather, with the group
    inserted by the first of its threads (no thread of ket's own)."""

    def __init__(self, insert: SyncInsert) -> None:
        self._insert = insert
        self._lock = threading.Lock()
        self._flying = False
        self._waiting: list[_ThreadPart] = []

    def insert(self, jobs: Sequence[NewJob], payloads: Sequence[str]) -> list[Inserted]:
        """As Gather.insert, in the caller's thread."""
        with self._lock:
            if not self._flying:
                self._flying = True
                part = None
            else:
                part = _ThreadPart(jobs, payloads)
                self._waiting.append(part)
        if part is None:
            try:
                return self._insert(jobs, payloads)
            finally:
                self._next()
        part.ready.wait()
        if part.lead is not None:  # this thread inserts the group gathered behind the last
            try:
                self._group(part.lead)
            finally:
                self._next()
        if part.error is not None:
            raise part.error
        assert part.inserted is not None
        return part.inserted

    def _next(self) -> None:
        with self._lock:
            parts, self._waiting = self._waiting, []
            if not parts:
                self._flying = False
                return
        parts[0].lead = parts
        parts[0].ready.set()

    def _group(self, parts: list[_ThreadPart]) -> None:
        parts[0].ready.clear()  # the leader's: set again once its own outcome is in
        plan = _plan(parts)
        try:
            batch = next(plan)
            while True:
                try:
                    result: list[Inserted] | Exception = self._insert(*batch)
                except Exception as error:
                    result = error
                batch = plan.send(result)
        except StopIteration as ended:
            outcomes: list[list[Inserted] | Exception | None] = ended.value
        except BaseException as error:  # interrupted: nobody is left waiting
            for part in parts:
                if not part.ready.is_set():
                    part.settle(None, error)
            raise
        for part, outcome in zip(parts, outcomes, strict=True):
            if isinstance(outcome, Exception):
                part.settle(None, outcome)
            else:
                part.settle(outcome, None)
