"""The worker roster in a control database, on SQLite and PostgreSQL: the schema a first report
installs equals the tables the statements use; rows turn stale, are forgotten, are removed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect

from ket.connection import budget
from ket.control.migration import CONTROL_MIGRATIONS
from ket.control.roster import SqlRoster
from ket.control.tables import metadata
from ket.store.roster import WorkerInfo

TABLES = ["ket_control_migrations", "ket_workers"]


@pytest.fixture(params=["sqlite", "postgresql"])
def control_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two empty control databases of one dialect (a file each; a schema each on the server)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'one.db'}", f"sqlite:///{tmp_path / 'two.db'}"
        return
    server = request.getfixturevalue("postgres_url")
    first = request.getfixturevalue("postgres_schema")
    second = f"{first}_b"
    admin = create_engine(server.replace("postgresql://", "postgresql+psycopg://"))
    with admin.begin() as connection:
        connection.exec_driver_sql(f'CREATE SCHEMA "{second}"')
    try:
        yield tuple(f"{server}?options=-c%20search_path%3D{s}" for s in (first, second))  # type: ignore[misc]
    finally:
        with admin.begin() as connection:
            connection.exec_driver_sql(f'DROP SCHEMA "{second}" CASCADE')
        admin.dispose()


def _info(worker_id: str, *, interval: float = 60.0) -> WorkerInfo:
    return WorkerInfo(
        id=worker_id,
        host="box",
        pid=7,
        started_at=datetime.now(UTC),
        tenants=("acme", "globex"),
        queues={"default": 4, "mail": 1},
        version="1.2.3",
        manifest_hash="f" * 64,
        interval_seconds=interval,
    )


def _shape(url: str) -> dict[str, Any]:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        inspector = inspect(engine)
        return {
            table: (
                [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
                inspector.get_pk_constraint(table)["constrained_columns"],
            )
            for table in TABLES
        }
    finally:
        engine.dispose()


def test_the_schema_a_first_report_installs_equals_the_tables_the_statements_use(
    control_urls: tuple[str, str],
) -> None:
    fresh, reported = control_urls
    engine = create_engine(fresh.replace("postgresql://", "postgresql+psycopg://"))
    metadata.create_all(engine)
    engine.dispose()

    async def report() -> None:
        roster = SqlRoster(reported)
        await roster.worker_report(_info("w1"))
        second = SqlRoster(reported)  # a second roster: nothing left to migrate
        await second.worker_report(_info("w2"))
        await second.close()
        await roster.close()

    asyncio.run(report())
    assert _shape(reported) == _shape(fresh)
    engine = create_engine(reported.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as connection:
        versions = connection.exec_driver_sql("SELECT version FROM ket_control_migrations")
        assert sorted(v for (v,) in versions) == [m.version for m in CONTROL_MIGRATIONS]
    engine.dispose()


def test_a_roster_reads_back_reports_marks_stale_forgets_and_removes(
    control_urls: tuple[str, str],
) -> None:
    url, _ = control_urls

    async def run() -> None:
        roster = SqlRoster(url)
        assert await roster.worker_list() == []  # no table yet: nobody, and nothing created
        assert await roster.worker_remove("w1") is False
        await roster.worker_report(_info("quick", interval=0.05))
        seen = await roster.worker_report(_info("w1"))
        assert [w.info.id for w in seen] == ["quick", "w1"]
        mine = seen[1]
        assert mine.info.tenants == ("acme", "globex")
        assert mine.info.queues == {"default": 4, "mail": 1}
        assert (mine.info.version, mine.info.pid, mine.stale) == ("1.2.3", 7, False)
        time.sleep(0.3)  # three of quick's intervals and more
        listed = {w.info.id: w for w in await roster.worker_list()}
        assert (listed["quick"].stale, listed["w1"].stale) == (True, False)
        assert listed["quick"].seen_seconds_ago >= 0.25
        # rows not seen for `forget_after_seconds` go at the next report
        seen = await roster.worker_report(_info("w1"), forget_after_seconds=0.2)
        assert [w.info.id for w in seen] == ["w1"]
        assert await roster.worker_remove("w1") is True
        assert await roster.worker_remove("w1") is False
        assert await roster.worker_list() == []
        await roster.close()

    asyncio.run(run())


def test_a_report_goes_before_work_that_waits_for_a_spent_budget(
    postgres_url: str, postgres_schema: str
) -> None:
    """A worker's report keeps its tenants as a heartbeat keeps a lease: behind a thousand
    tenants' sweeps waiting for the budget, it would come late enough for its peers to take
    the worker for gone."""
    url = f"{postgres_url}?options=-c%20search_path%3D{postgres_schema}"
    order: list[str] = []

    async def run() -> None:
        spent = budget.ConnectionBudget(3)
        budget.install(spent)
        try:
            roster = SqlRoster(url)
            await roster.worker_report(_info("w1"))  # installs the table: not what is measured
            gates = [asyncio.Event() for _ in range(3)]

            async def hold(gate: asyncio.Event) -> None:
                async with spent.held():
                    await gate.wait()

            holders = [asyncio.ensure_future(hold(gate)) for gate in gates]
            await asyncio.sleep(0.05)

            async def sweep(n: int) -> None:
                async with spent.held():
                    order.append(f"sweep {n}")

            async def report() -> None:
                await roster.worker_report(_info("w1"))
                order.append("report")

            herd = [asyncio.ensure_future(sweep(n)) for n in range(5)]
            await asyncio.sleep(0.05)  # the herd waits first
            reported = asyncio.ensure_future(report())
            await asyncio.sleep(0.05)
            gates[0].set()  # one connection's room comes free
            await asyncio.wait_for(reported, 10)
            for gate in gates[1:]:
                gate.set()
            await asyncio.wait_for(asyncio.gather(*holders, *herd), 10)
            await roster.close()
        finally:
            budget.install(None)

    asyncio.run(run())
    assert order[0] == "report", order
