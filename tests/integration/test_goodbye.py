"""Connections the budget counts are counted until their server process is gone: a report to
the control database, a read of the tenant registry and the listener's probe return only then
(else, with the budget's room taken again at once, the server would count one connection more
than the budget meanwhile)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import psycopg
import pytest

from ket import process
from ket.connection import budget, goodbye
from ket.control.registry_reader import RegistryReader
from ket.control.roster import SqlRoster
from ket.store.roster import WorkerInfo
from ket.wakeup.listener import TIMING, send_probe


def _left_behind(url: str, tag: str, call: Callable[[], Awaitable[object]]) -> list[int]:
    """After each of 20 calls, how many server processes named `tag` are still there."""

    async def body() -> list[int]:
        seen = []
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            for _ in range(20):
                await call()
                cursor = await admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
                )
                seen.append((await cursor.fetchone() or (None,))[0])
        return seen

    return asyncio.run(body())


def test_a_report_to_the_control_database_returns_once_its_server_process_is_gone(
    postgres_url: str, postgres_schema: str
) -> None:
    tag = f"ket-roster-{uuid.uuid4().hex[:8]}"
    url = f"{postgres_url}?application_name={tag}&options=-c%20search_path%3D{postgres_schema}"
    roster = SqlRoster(url)
    info = WorkerInfo(
        id="w1",
        host="box",
        pid=7,
        started_at=datetime.now(UTC),
        tenants=None,
        queues={"default": 1},
        version="1",
        manifest_hash="f" * 64,
        interval_seconds=60.0,
    )
    assert _left_behind(postgres_url, tag, lambda: roster.worker_report(info)) == [0] * 20


def test_a_read_of_the_tenant_registry_returns_once_its_server_process_is_gone(
    postgres_url: str,
) -> None:
    tag = f"ket-registry-{uuid.uuid4().hex[:8]}"
    reader = RegistryReader(f"{postgres_url}?application_name={tag}")

    async def read() -> object:
        return await asyncio.to_thread(reader.exists)

    assert _left_behind(postgres_url, tag, read) == [0] * 20


def test_the_listener_s_notify_probe_returns_once_its_server_process_is_gone(
    postgres_url: str,
) -> None:
    # the listener probes a quiet channel every half minute, on a connection of its own
    tag = f"ket-probe-{uuid.uuid4().hex[:8]}"
    dsn = f"{postgres_url}?application_name={tag}"

    async def probe() -> None:
        await send_probe(dsn, "ket-test-probe", TIMING)

    assert _left_behind(postgres_url, tag, probe) == [0] * 20


def test_a_connection_being_closed_keeps_its_room_in_the_budget_until_its_server_is_gone(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room of a connection closed by close_quietly is taken again only once its server
    process is gone: before, the budget counted it closed at the close, and a worker was seen
    with 11 connections at a budget of 10 in pg_stat_activity."""
    real = goodbye.server_gone
    order: list[str] = []

    async def slow_goodbye(peer: object) -> None:
        await asyncio.sleep(0.5)  # a server slow to hang up
        await real(peer)  # type: ignore[arg-type]
        order.append("gone")

    monkeypatch.setattr(goodbye, "server_gone", slow_goodbye)

    async def body() -> None:
        spent = budget.ConnectionBudget(budget.MIN_LIMIT)

        async def open_one() -> psycopg.AsyncConnection[object]:
            return await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)

        held = [await spent.connect(open_one, kind="lane") for _ in range(budget.MIN_LIMIT)]
        closing = asyncio.ensure_future(goodbye.close_quietly(held[0]))
        await asyncio.sleep(0.05)  # closed on this side, its server not gone yet
        with process.fresh():
            budget.install(spent)
            another = await asyncio.wait_for(spent.connect(open_one, kind="lane"), 5)
        order.append("opened")
        await closing
        for raw in [*held[1:], another]:
            await goodbye.close_quietly(raw)

    asyncio.run(body())
    assert order[:2] == ["gone", "opened"]  # (the other closes follow)
