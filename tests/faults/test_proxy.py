"""The fault proxy itself: psycopg through it in each mode, in a thread and as a process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import make_url

from tests.faults.proxy import Proxy

ROOT = Path(__file__).resolve().parents[2]


def _via(postgres_url: str, port: int) -> str:
    return make_url(postgres_url).set(host="127.0.0.1", port=port).render_as_string(False)


def _target(postgres_url: str) -> tuple[str, int]:
    url = make_url(postgres_url)
    return (url.host or "127.0.0.1", url.port or 5432)


def _answers(url: str) -> bool:
    with psycopg.connect(url, connect_timeout=5, autocommit=True) as connection:
        return connection.execute("SELECT 1").fetchone() == (1,)


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _swallow(call: Callable[[], object]) -> Callable[[], None]:
    """`call`, ignoring the error a reset connection raises (a thread must not fail loudly)."""

    def run() -> None:
        with contextlib.suppress(psycopg.OperationalError):
            call()

    return run


def test_psycopg_works_through_the_proxy_in_pass_mode(postgres_url: str) -> None:
    with Proxy(_target(postgres_url)) as proxy:
        assert _answers(_via(postgres_url, proxy.port))
        assert proxy.accepted == 1


def test_blackhole_hangs_queries_refuse_resets_and_pass_serves_new_connections(
    postgres_url: str,
) -> None:
    with Proxy(_target(postgres_url)) as proxy:
        url = _via(postgres_url, proxy.port)
        connection = psycopg.connect(url, autocommit=True)
        outcome: list[BaseException | tuple[object, ...] | None] = []

        def query() -> None:
            try:
                outcome.append(connection.execute("SELECT 1").fetchone())
            except psycopg.Error as error:
                outcome.append(error)

        proxy.set_mode("blackhole")
        hung = threading.Thread(target=query, daemon=True)
        hung.start()
        hung.join(1.5)
        assert hung.is_alive(), f"a query through the blackhole finished: {outcome}"
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):  # the handshake is dropped too
            psycopg.connect(url, connect_timeout=2)
        assert time.monotonic() - started >= 1.5

        proxy.set_mode("refuse")  # resets the hung connection: its query fails at once
        hung.join(5)
        assert not hung.is_alive(), "refuse did not reset the blackholed connection"
        assert len(outcome) == 1 and isinstance(outcome[0], psycopg.OperationalError)
        connection.close()
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=10)
        assert time.monotonic() - started < 2.0, "refuse should fail a connect at once"

        proxy.set_mode("pass")
        assert _answers(url)


def test_a_connection_blackholed_once_stays_blackholed_after_pass(postgres_url: str) -> None:
    with Proxy(_target(postgres_url)) as proxy:
        url = _via(postgres_url, proxy.port)
        connection = psycopg.connect(url, autocommit=True)
        proxy.set_mode("blackhole")
        proxy.set_mode("pass")
        hung = threading.Thread(target=_swallow(lambda: connection.execute("SELECT 1")))
        hung.start()
        hung.join(1.0)
        assert hung.is_alive(), "a blackholed connection forwarded again after pass"
        assert _answers(url)  # while a new connection works
    # leaving the proxy closes the hung connection, which ends the thread
    hung.join(5)
    assert not hung.is_alive()
    connection.close()


def test_the_proxy_runs_as_a_process_switched_by_control_file_and_signal(
    postgres_url: str, tmp_path: Path
) -> None:
    control = tmp_path / "mode"
    control.write_text("pass")
    host, port = _target(postgres_url)
    command = [sys.executable, "-m", "tests.faults.proxy", "--listen-port", "0"]
    process = subprocess.Popen(
        [*command, "--target", f"{host}:{port}", "--control", str(control)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline().strip()
        assert first.startswith("listening on 127.0.0.1:"), first
        url = _via(postgres_url, int(first.rsplit(":", 1)[1]))
        assert _answers(url)

        control.write_text("refuse\n")

        def refused() -> bool:
            try:
                _answers(url)
            except psycopg.OperationalError:
                return True
            return False

        _until(refused, 5, "the control file to switch the proxy to refuse")
        control.write_text("")  # or the watcher would re-apply refuse after the signal
        process.send_signal(signal.SIGHUP)  # back to pass by signal
        _until(lambda: not refused(), 5, "SIGHUP to switch the proxy back to pass")
    finally:
        process.terminate()
        assert process.wait(10) == 0
        if process.stdout is not None:
            process.stdout.close()
