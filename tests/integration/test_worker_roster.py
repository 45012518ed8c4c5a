"""Real `ket worker` processes in the control database, on SQLite and PostgreSQL: two workers of
different manifests warn about each other and are listed; `ket jobs stats` reports the mismatch;
a killed worker turns stale; a worker stopped cleanly leaves no row.

On SQLite there is no registry, so the control database is the single tenant's own; on
PostgreSQL the test gives the app a registry (KET_REGISTRY_URL), which is then the control
database.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from ket.control.registry import TenantRegistry
from tests.databases import drop_databases

# how often the workers report themselves (KET_PRESENCE_INTERVAL_S): stale after three of them
REPORT_SECONDS = 0.5
APP = """
from ket import define_deployment, define_job, define_module

async def work(ctx, input):
    pass

app = define_module(name="app", jobs={{
    "work": define_job(idempotent=True, max_attempts={attempts}, handler=work),
}})
main = define_deployment(name="main", modules=[app], worker={{
    "lease_ms": 3000, "poll_max_ms": 200, "shutdown_grace_ms": 500,
}})
"""
WAIT_SECONDS = 30.0


class Project:
    """One copy of the app (its job's max_attempts tells the copies apart) on shared databases."""

    def __init__(self, root: Path, attempts: int, env: dict[str, str]) -> None:
        self.root = root
        (root / "app").mkdir(parents=True)
        (root / "app" / "__init__.py").write_text("")
        (root / "app" / "workspace.py").write_text(textwrap.dedent(APP.format(attempts=attempts)))
        (root / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app/workspace.py"\n')
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")} | env
        self.env["KET_PRESENCE_INTERVAL_S"] = str(REPORT_SECONDS)
        self.log = root / "worker.log"
        self.process: subprocess.Popen[str] | None = None

    def ket(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ket.cli.main", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def manifest_hash(self) -> str:
        printed = self.ket("manifest")
        assert printed.returncode == 0, printed.stderr
        return hashlib.sha256(printed.stdout.encode("utf-8")).hexdigest()

    def start(self) -> subprocess.Popen[str]:
        with self.log.open("w") as output:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--log-level", "INFO"],
                cwd=self.root,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
        return self.process

    def workers(self) -> dict[int, dict[str, Any]]:
        """The rows of `ket workers list --format json`, by pid."""
        listed = self.ket("workers", "list", "--format", "json")
        assert listed.returncode == 0, listed.stderr
        return {row["pid"]: row for row in json.loads(listed.stdout)["workers"]}

    def warnings(self) -> list[str]:
        text = self.log.read_text(errors="replace")
        return [line for line in text.splitlines() if "WARNING" in line and "runs manifest" in line]


def _until(condition: Callable[[], bool], what: str, seconds: float = WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _rows_until(
    project: Project, wanted: Callable[[dict[int, dict[str, Any]]], bool], what: str
) -> dict[int, dict[str, Any]]:
    """The first `ket workers list` whose rows are `wanted` (each listing costs a process)."""
    found: list[dict[int, dict[str, Any]]] = []

    def listed() -> bool:
        found[:] = [project.workers()]
        return wanted(found[0])

    _until(listed, what)
    return found[0]


def _seen(row: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(row["last_seen_at"])


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment both copies share: their tenant database (and, on PostgreSQL, a
    registry of the test's own, dropped afterwards with the tenant database)."""
    if request.param == "sqlite":
        yield {"KET_DATABASE_URL": f"sqlite:///{tmp_path / 'data'}/{{tenant}}.db"}
        return
    server: str = request.getfixturevalue("postgres_url")
    names = [f"ket_roster_{uuid.uuid4().hex[:10]}", f"ket_roster_reg_{uuid.uuid4().hex[:10]}"]
    with psycopg.connect(server, autocommit=True) as admin:
        for name in names:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    tenant, registry = (f"{server.rsplit('/', 1)[0]}/{name}" for name in names)
    TenantRegistry(registry).close()  # a registry exists (with no tenants): the control database
    try:
        yield {"KET_DATABASE_URL": tenant, "KET_REGISTRY_URL": registry}
    finally:
        drop_databases(server, names)


def test_two_workers_of_different_manifests_are_listed_warned_about_and_leave_or_go_stale(
    tmp_path: Path, databases: dict[str, str]
) -> None:
    one = Project(tmp_path / "one", 3, databases)
    two = Project(tmp_path / "two", 5, databases)
    migrated = one.ket("migrate")
    assert migrated.returncode == 0, migrated.stderr
    first, second = one.manifest_hash(), two.manifest_hash()
    assert first != second
    try:
        p1, p2 = one.start(), two.start()
        _until(lambda: bool(one.warnings() and two.warnings()), "each worker's warning")
        # read after both warnings: the reports that warned are in these rows
        rows = _rows_until(
            one,
            lambda rows: {p for p, w in rows.items() if not w["stale"]} == {p1.pid, p2.pid},
            "both workers listed as live",
        )
        assert (rows[p1.pid]["manifest_hash"], rows[p2.pid]["manifest_hash"]) == (first, second)
        assert rows[p1.pid]["tenants"] == "all"
        assert rows[p1.pid]["queues"] == {"default": 10}
        assert rows[p1.pid]["interval_seconds"] == REPORT_SECONDS

        stats = one.ket("jobs", "stats", "--format", "json")
        assert stats.returncode == 0, stats.stderr
        report = json.loads(stats.stdout)
        assert report["manifest_mismatch"] is True
        assert report["manifests"] == {first: 1, second: 1}
        text = one.ket("jobs", "stats").stdout
        assert "live workers run 2 different manifests" in text
        assert first[:12] in text and second[:12] in text

        # both have reported again since they warned, each seeing the other live: the warning is
        # not repeated
        _rows_until(
            one,
            lambda later: all(
                _seen(later[p]) > _seen(rows[p]) and not later[p]["stale"] for p in (p1.pid, p2.pid)
            ),
            "a report from each worker after its warning",
        )
        [said] = one.warnings()
        assert f"runs manifest {second[:12]}, but this worker" in said
        assert f"runs manifest {first[:12]}:" in said
        [said] = two.warnings()
        assert f"runs manifest {first[:12]}, but this worker" in said
        assert f"runs manifest {second[:12]}:" in said

        p2.send_signal(signal.SIGKILL)
        p2.wait(timeout=10)
        rows = _rows_until(
            one, lambda rows: rows[p2.pid]["stale"], "the killed worker's row to turn stale"
        )
        assert rows[p1.pid]["stale"] is False

        p1.send_signal(signal.SIGTERM)
        assert p1.wait(timeout=30) == 0
        rows = one.workers()
        assert set(rows) == {p2.pid}  # the clean exit removed its row; the killed one stays
        assert rows[p2.pid]["stale"] is True
        after = json.loads(one.ket("jobs", "stats", "--format", "json").stdout)
        assert (after["manifest_mismatch"], after["manifests"]) == (False, {})
    finally:
        for project in (one, two):
            if project.process is not None and project.process.poll() is None:
                project.process.kill()
                project.process.wait(timeout=10)
