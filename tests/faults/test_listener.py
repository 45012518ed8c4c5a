"""The PostgreSQL listener under faults: half-open and killed connections, a NOTIFY that never
arrives (as behind a transaction-mode pooler), and a bug in its own loop.

Every test runs on a fresh database with short probe intervals; timing bounds are generous and
only tell "soon" from "never".
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Collection, Iterator

import psycopg
import pytest
from sqlalchemy import make_url

from ket.store import NewJob
from ket.store.sql import SqlStore
from ket.tck.arrange import quiet
from ket.wakeup import listener as listening
from ket.wakeup.listener import Listener, Timing
from ket.wakeup.local import Wakeups
from tests.conftest import migrated_postgres_database
from tests.faults.proxy import Proxy

FAST = Timing(
    probe_every=0.5,
    probe_timeout=0.5,
    notify_check=1.0,
    connect_timeout=2,  # libpq's least
    backoff_min=0.05,
    backoff_max=0.5,
)
SOON = 15.0  # "never" is anything longer


@pytest.fixture
def database(postgres_url: str) -> Iterator[str]:
    """A fresh database with ket's tables, dropped afterwards; its URL."""
    with migrated_postgres_database(postgres_url, "ket_faults") as url:
        yield url


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Timing:
    """Short intervals for every listener the stores start; the listener's logs captured."""
    monkeypatch.setattr(listening, "TIMING", FAST)
    caplog.set_level(logging.INFO, logger="ket.store.listener")
    return FAST


def _via(url: str, port: int) -> str:
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def _target(url: str) -> tuple[str, int]:
    parsed = make_url(url)
    return (parsed.host or "127.0.0.1", parsed.port or 5432)


def _other_handle(url: str) -> str:
    """The same database under another URL: a handle whose in-process wake-ups are not shared,
    so a waiter can only hear its inserts through NOTIFY."""
    return (
        make_url(url)
        .update_query_dict({"application_name": "ket_inserter"})
        .render_as_string(hide_password=False)
    )


def _terminate_listener(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND datname = current_database() AND query LIKE 'LISTEN%%'"
        ).fetchall()
    return len(rows)


def _listeners(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as admin:
        [(count,)] = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND datname = current_database() AND query LIKE 'LISTEN%%' AND state = 'idle'"
        ).fetchall()
    return int(count)


async def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


def _lines(caplog: pytest.LogCaptureFixture, pattern: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if re.search(pattern, r.getMessage())]


async def _logged(
    caplog: pytest.LogCaptureFixture, pattern: str, timeout: float = SOON
) -> logging.LogRecord:
    """The first listener log line matching `pattern`, waiting up to `timeout` for it."""
    await _until(lambda: bool(_lines(caplog, pattern)), timeout, f"a log line like {pattern!r}")
    return _lines(caplog, pattern)[0]


async def _woken_by_insert(waiter: SqlStore, inserter: SqlStore, queues: Collection[str]) -> None:
    """After any spurious wake-ups settle, an insert through `inserter` wakes `waiter`."""
    await quiet(waiter, queues)
    waiting = asyncio.ensure_future(waiter.wait_for_jobs(queues, SOON))
    await asyncio.sleep(0.1)  # listening before the insert
    await inserter.job_insert([NewJob(name="fault.job", queue=sorted(queues)[0])])
    assert await waiting is True, "the insert's NOTIFY never woke the waiter"


def test_a_blackholed_listen_connection_is_probed_dropped_and_replaced(
    database: str, fast: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    with Proxy(_target(database)) as proxy:

        async def main() -> None:
            waiter = await SqlStore.open(_via(database, proxy.port))
            inserter = await SqlStore.open(database)
            try:
                await quiet(waiter, ["mail"])
                attempts = proxy.accepted
                proxy.set_mode("blackhole")
                detection = fast.probe_every + fast.probe_timeout + 5  # generous margin
                failure = await _logged(caplog, "liveness probe got no answer", detection)
                assert failure.levelno == logging.WARNING
                assert f"postgresql://root@127.0.0.1:{proxy.port}/" in failure.getMessage()
                assert "reconnecting in" in failure.getMessage()
                await _until(lambda: proxy.accepted > attempts, SOON, "a reconnect attempt")
                proxy.set_mode("pass")
                await _logged(caplog, "listening again after")
                await _woken_by_insert(waiter, inserter, ["mail"])
            finally:
                await waiter.close()
                await inserter.close()

        asyncio.run(main())


def test_a_lost_listen_connection_wakes_every_waiter_while_the_database_stays_away(
    database: str, fast: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    """A waiter paced for hints waits for minutes: when the LISTEN connection is lost it must
    wake at once (its queue then polls), not at the reconnect, which may be long in coming."""
    with Proxy(_target(database)) as proxy:

        async def main() -> None:
            waiter = await SqlStore.open(_via(database, proxy.port))
            try:
                await quiet(waiter, ["mail"])
                waiting = asyncio.ensure_future(waiter.wait_for_jobs(["mail"], 600.0))
                await asyncio.sleep(0.1)
                proxy.set_mode("refuse")  # resets the connection; no new one gets through
                assert await asyncio.wait_for(waiting, 5.0) is True
                assert waiter.idle_poll(0.2) == 0.2  # not healthy: queues poll at poll_max
                failure = await _logged(caplog, "idle queues poll until it is back")
                assert failure.levelno == logging.WARNING
            finally:
                proxy.set_mode("pass")
                await waiter.close()

        asyncio.run(main())


def test_a_terminated_listen_backend_is_replaced_and_wakes_waiters_again(
    database: str, fast: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        waiter = await SqlStore.open(database)
        inserter = await SqlStore.open(_other_handle(database))
        try:
            await quiet(waiter, ["mail"])
            assert _terminate_listener(database) == 1
            failure = await _logged(caplog, "server closed the connection|terminating connection")
            assert failure.levelno == logging.WARNING
            assert "reconnecting in" in failure.getMessage()
            await _logged(caplog, "listening again after 1 failure")
            await _woken_by_insert(waiter, inserter, ["mail"])
        finally:
            await waiter.close()
            await inserter.close()

    asyncio.run(main())


def test_a_notify_that_never_arrives_is_reported_once_and_waits_become_tight_polls(
    database: str,
    postgres_url: str,
    fast: Timing,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As behind a transaction-mode pooler: the probe NOTIFY goes where no LISTEN hears it (another
    # database: NOTIFY is scoped to one).
    send = listening.send_probe
    monkeypatch.setattr(
        listening, "send_probe", lambda dsn, payload, timing: send(postgres_url, payload, timing)
    )
    secret = make_url(database).set(password="s3cret-pw").render_as_string(hide_password=False)

    async def main() -> None:
        waiter = await SqlStore.open(secret)
        try:
            await waiter.wait_for_jobs(["mail"], 0.01)  # starts the listener
            warning = await _logged(caplog, "NOTIFY does not arrive on")
            assert warning.levelno == logging.WARNING
            assert "transaction-mode pooler" in warning.getMessage()
            assert "polling every 0.25 s" in warning.getMessage()
            for _ in range(3):
                started = time.monotonic()
                assert await waiter.wait_for_jobs(["mail"], 60.0) is False
                assert time.monotonic() - started < 5.0, "a deaf listener's wait was not capped"
            assert len(_lines(caplog, "NOTIFY does not arrive")) == 1
            assert "s3cret-pw" not in caplog.text

            # the probe gets through after a reconnect: deafness clears, waits are whole again
            monkeypatch.setattr(listening, "send_probe", send)
            assert _terminate_listener(database) == 1
            await _logged(caplog, "NOTIFY arrives on .* again")
            assert await quiet(waiter, ["mail"], wait=2.0) >= 1.5
        finally:
            await waiter.close()

    asyncio.run(main())


class _FlakyWakeups(Wakeups):
    """Wake-ups whose first delivery raises, as a bug in the listener's loop would."""

    def __init__(self) -> None:
        super().__init__()
        self.bugs = 1

    def notify(self, queues: Collection[str]) -> None:  # type: ignore[override]
        if self.bugs:
            self.bugs -= 1
            raise RuntimeError("a bug in delivering a wake-up")
        super().notify(queues)


def test_an_unexpected_error_in_the_listener_is_logged_and_it_goes_on_until_cancelled(
    database: str, fast: Timing, caplog: pytest.LogCaptureFixture
) -> None:
    def notify(queue: str) -> None:
        with psycopg.connect(database, autocommit=True) as other:
            other.execute("SELECT pg_notify('ket_jobs', %s)", (queue,))

    async def main() -> None:
        wakeups = _FlakyWakeups()
        listener = Listener(database, wakeups, timing=fast)
        await listener.ready(SOON)
        notify("mail")
        failure = await _logged(caplog, "a bug in delivering a wake-up")
        assert failure.levelno == logging.ERROR
        assert failure.exc_info is not None  # a bug gets its traceback
        await _logged(caplog, "listening again after 1 failure")
        waiting = asyncio.ensure_future(wakeups.wait(["mail"], SOON))
        await asyncio.sleep(0.1)
        notify("mail")
        assert await waiting is True
        assert _listeners(database) == 1
        await asyncio.wait_for(listener.stop(), 5)
        await _until(lambda: _listeners(database) == 0, 5, "the LISTEN connection to close")

    asyncio.run(main())


def test_a_failure_repeating_within_the_window_is_logged_once_then_counted(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ket.store.listener")
    timing = Timing(backoff_min=0.01, backoff_max=0.02, repeat_window=1.5, connect_timeout=2)
    with Proxy(_target(database)) as proxy:
        proxy.set_mode("refuse")

        async def main() -> None:
            listener = Listener(_via(database, proxy.port), Wakeups(), timing=timing)
            try:
                await listener.ready(0.01)
                await _until(lambda: proxy.accepted >= 20, SOON, "20 connect attempts")
                logged = _lines(caplog, "reconnecting in")
                # one line per distinct failure (a reset may read as one of two errors)
                assert 1 <= len(logged) <= 2, [r.getMessage() for r in logged]
                summary = await _logged(caplog, r"\d+ more failure\(s\) in the last 1.5 s")
                assert summary.levelno == logging.WARNING
                proxy.set_mode("pass")
                await _logged(caplog, "listening again after")
            finally:
                await listener.stop()

        asyncio.run(main())
