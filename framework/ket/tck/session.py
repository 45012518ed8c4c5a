"""The dashboard's sessions (capability SessionStore): kept by key until they expire on the
store's clock or are closed, seen alike by every replica, each field as given.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from ket.errors import JobRejected
from ket.store.contract import SessionStore
from ket.store.types import DashboardSession
from ket.tck.clock_seam import on_store_time
from ket.tck.harness import Tck, tck_test

__all__ = [
    "test_a_closed_session_is_found_by_no_replica",
    "test_a_session_is_found_until_it_expires_on_the_store_clock",
    "test_a_session_keeps_every_field_as_given",
    "test_on_the_store_own_clock_a_session_expires",
    "test_opening_a_session_lets_the_expired_ones_go",
    "test_sessions_refuse_what_no_store_could_keep",
]

HOUR = 3_600.0


def _sessions(t: Tck) -> SessionStore:
    return t.require(SessionStore)  # type: ignore[type-abstract]


def _session(key: str = "digest-1", **fields: object) -> DashboardSession:
    values: dict[str, object] = {"key": key, "subject": "ada", "permissions": ("jobs:read",)}
    values.update(fields)
    return DashboardSession(**values)  # type: ignore[arg-type]


@tck_test
async def test_a_session_is_found_until_it_expires_on_the_store_clock(t: Tck) -> None:
    sessions = _sessions(t)
    await sessions.session_open(_session(), ttl_seconds=HOUR)
    found = await sessions.session_find("digest-1")
    assert found is not None and found.subject == "ada"
    assert found.expires_at == t.clock.now() + timedelta(seconds=HOUR)
    t.clock.advance(seconds=HOUR - 1)
    assert await sessions.session_find("digest-1") is not None
    t.clock.advance(seconds=1)
    assert await sessions.session_find("digest-1") is None
    assert await sessions.session_find("no-such-key") is None


@tck_test
async def test_a_closed_session_is_found_by_no_replica(t: Tck) -> None:
    sessions = _sessions(t)
    replica = await t.replica()
    assert isinstance(replica, SessionStore), "a replica lacks the capability its store has"
    await sessions.session_open(_session(), ttl_seconds=HOUR)
    await sessions.session_open(_session("digest-2", subject="grace"), ttl_seconds=HOUR)
    assert await replica.session_find("digest-1") is not None  # one server signs in...
    await replica.session_close("digest-1")  # ...another signs out
    assert await sessions.session_find("digest-1") is None
    assert await replica.session_find("digest-1") is None
    assert await sessions.session_find("digest-2") is not None  # the others stay
    await sessions.session_close("digest-1")  # closing again is nothing


@tck_test
async def test_a_session_keeps_every_field_as_given(t: Tck) -> None:
    sessions = _sessions(t)
    given = _session(
        subject="Zoë <ops@example.com>",
        company="north",
        permissions=("jobs:read", "jobs:write", "call:sales.*"),
    )
    await sessions.session_open(given, ttl_seconds=HOUR)
    found = await sessions.session_find("digest-1")
    assert found is not None
    assert (found.key, found.subject, found.company, found.permissions) == (
        given.key,
        given.subject,
        given.company,
        given.permissions,
    )
    await sessions.session_open(_session("digest-2", permissions=()), ttl_seconds=HOUR)
    bare = await sessions.session_find("digest-2")
    assert bare is not None and bare.company is None and bare.permissions == ()


@tck_test
async def test_opening_a_session_lets_the_expired_ones_go(t: Tck) -> None:
    sessions = _sessions(t)
    await sessions.session_open(_session("old"), ttl_seconds=60)
    t.clock.advance(seconds=61)
    await sessions.session_open(_session("new"), ttl_seconds=60)
    t.clock.set(t.clock.now() - timedelta(seconds=30))  # set back: the expired one is gone
    assert await sessions.session_find("old") is None
    assert await sessions.session_find("new") is not None


@tck_test
async def test_sessions_refuse_what_no_store_could_keep(t: Tck) -> None:
    sessions = _sessions(t)
    for bad, words in (
        (_session(""), "session key"),
        (_session("k\x00"), "session key"),
        (_session(subject=""), "session subject"),
        (_session(company="a\x00b"), "session company"),
        (_session(permissions=("x" * 10_000,)), "session permission"),
    ):
        with pytest.raises(JobRejected, match=words):
            await sessions.session_open(bad, ttl_seconds=HOUR)
    for ttl in (0, -1, float("nan"), 10**9):
        with pytest.raises(JobRejected, match="ttl_seconds"):
            await sessions.session_open(_session(), ttl_seconds=ttl)
    with pytest.raises(JobRejected, match="session key"):
        await sessions.session_find("")
    assert await sessions.session_find("digest-1") is None  # nothing was written


@on_store_time
async def test_on_the_store_own_clock_a_session_expires(t: Tck) -> None:
    sessions = _sessions(t)
    # a second: long enough for the find that follows on a busy machine (50 ms was not)
    await sessions.session_open(_session(), ttl_seconds=1.0)
    assert await sessions.session_find("digest-1") is not None
    await asyncio.sleep(1.1)  # real time: the store's own clock (the database's) moves on
    assert await sessions.session_find("digest-1") is None
