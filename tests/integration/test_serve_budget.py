"""`ket serve` holds at most `--max-connections` PostgreSQL connections, over every tenant it
serves (issue 26 item 3; issue 27 item 1): with twenty tenants called at once, every request is
answered and the server never holds more than its budget. Before, each tenant's store took a
pool of its own (up to 5 connections and 5 more of overflow), so some twenty tenants served took
PostgreSQL's default 100 and locked the workers out.
"""

from __future__ import annotations

import asyncio
import os
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import psycopg
import pytest

from ket.control.registry import TenantRegistry
from ket.store.sql import SqlStore

from ..databases import Sampler, create_database, drop_databases, held_by

TENANTS = [f"s{n:02d}" for n in range(20)]
CALLS = 4  # concurrent calls per tenant
BUDGET = 5
APP_NAME = "ket-serve-budget"  # the server's application_name (PGAPPNAME)
APP = """
from ket import define_deployment, define_function, define_job, define_module
from ket.serve import AuthRequest, Principal

async def authenticate(request: AuthRequest):
    if request.bearer_token() == "t0ken":
        return Principal(subject="ops", permissions={"call:*"})
    return None

async def work(ctx, input):
    return None

async def place(ctx, input):
    await ctx.jobs.enqueue("app.work", {"n": input.n})
    return "placed"

app = define_module(
    name="app",
    functions={
        "place": define_function(input={"n": "int"}, effects=["enqueue:app.work"], handler=place),
    },
    jobs={"work": define_job(input={"n": "int"}, idempotent=True, handler=work)},
)
main = define_deployment(name="main", modules=[app], serve={"authenticate": authenticate})
"""
PROJECT = "serve_budget_app"
SERVE = [sys.executable, "-m", "ket.cli.main", "serve", "--port", "0"]
LISTENING = re.compile(r"on (http://127\.0\.0\.1:\d+)")


class Tenants:
    def __init__(self, admin: str, root: Path) -> None:
        self.admin = admin
        self.root = root
        self.prefix = f"ket_sb_{uuid.uuid4().hex[:8]}_"
        self.names: list[str] = []

    def url(self, database: str) -> str:
        return f"{self.admin.rsplit('/', 1)[0]}/{self.prefix}{database}"

    def create(self) -> None:
        seed = TENANTS[0]
        self._create(seed)

        async def migrate() -> None:
            await (await SqlStore.open(self.url(seed), migrate=True)).close()

        asyncio.run(migrate())
        for name in TENANTS[1:]:
            self._create(name, template=self.prefix + seed)
        self._create("registry")
        registry = TenantRegistry(self.url("registry"))
        try:
            for name in TENANTS:
                registry.add(name, template=self.url("{tenant}"))
        finally:
            registry.close()
        (self.root / f"{PROJECT}.py").write_text(textwrap.dedent(APP))
        (self.root / "pyproject.toml").write_text(f'[tool.ket]\nworkspace = "{PROJECT}.py"\n')

    def _create(self, name: str, template: str | None = None) -> None:
        create_database(self.admin, self.prefix + name, template)
        self.names.append(self.prefix + name)

    def drop(self) -> None:
        drop_databases(self.admin, self.names)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url("{tenant}"),
            KET_REGISTRY_URL=self.url("registry"),
            PGAPPNAME=APP_NAME,
            PYTHONPATH=os.pathsep.join(
                [str(self.root), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        )
        return env

    def held(self) -> int:
        return held_by(self.admin, APP_NAME)

    def jobs(self, name: str) -> int:
        with psycopg.connect(self.url(name)) as connection:
            row = connection.execute("SELECT count(*) FROM ket_jobs").fetchone()
        return int(row[0]) if row else 0


@pytest.fixture
def tenants(postgres_url: str, tmp_path: Path) -> Iterator[Tenants]:
    made = Tenants(postgres_url, tmp_path)
    try:
        made.create()
        yield made
    finally:
        made.drop()


@contextmanager
def _serving(tenants: Tenants) -> Iterator[tuple[str, list[str]]]:
    """`ket serve` on the tenants at --max-connections BUDGET: its address, and the lines it
    printed (all of them once the block is over and the server stopped)."""
    process = subprocess.Popen(
        [*SERVE, "--max-connections", str(BUDGET)],
        cwd=tenants.root,
        env=tenants.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    printed: list[str] = []
    try:
        yield _started(process, lines), printed
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(timeout=10)
        printed.extend(lines.queue)


def _started(process: subprocess.Popen[str], lines: queue.Queue[str]) -> str:
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        found = LISTENING.search(line)
        if found and "serving the functions" in line:
            return found.group(1)
    process.kill()
    raise AssertionError("ket serve did not start:\n" + "".join(seen))


async def _call_every_tenant(base: str) -> list[int]:
    """CALLS calls of app.place into every tenant, all at once: their status codes."""
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:

        async def call(tenant: str, n: int) -> int:
            answer = await client.post(
                "/functions/app.place",
                json={"n": n},
                headers={"Authorization": "Bearer t0ken", "X-Ket-Tenant": tenant},
            )
            return answer.status_code

        return await asyncio.gather(*(call(t, n) for t in TENANTS for n in range(CALLS)))


def test_ket_serve_answers_every_tenant_within_its_connection_budget(tenants: Tenants) -> None:
    with _serving(tenants) as (base, lines), Sampler(tenants.held) as sampler:
        codes = asyncio.run(_call_every_tenant(base))
        time.sleep(0.5)  # a last sample after the calls
    output = "".join(lines)
    assert codes == [200] * (len(TENANTS) * CALLS), output[-4_000:]
    assert [tenants.jobs(name) for name in TENANTS] == [CALLS] * len(TENANTS)
    most = max(sampler.samples, default=0)
    assert 0 < most <= BUDGET, (most, output[-4_000:])
    print(f"{len(codes)} calls over {len(TENANTS)} tenants; at most {most} connections held")


FLOOD_SECONDS = 6.0


async def _flood_and_call(base: str) -> tuple[int, list[float]]:
    """Every tenant but the first called CALLS at a time without pause for FLOOD_SECONDS, while
    one caller calls the first tenant, one call after another: how many flood calls were
    answered, and the first tenant's answer times."""
    quiet, busy = TENANTS[0], TENANTS[1:]
    deadline = time.monotonic() + FLOOD_SECONDS
    answered = 0
    times: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:

        async def call(tenant: str) -> int:
            answer = await client.post(
                "/functions/app.place",
                json={"n": 1},
                headers={"Authorization": "Bearer t0ken", "X-Ket-Tenant": tenant},
            )
            return answer.status_code

        async def flood(tenant: str) -> None:
            nonlocal answered
            while time.monotonic() < deadline:
                assert await call(tenant) == 200
                answered += 1

        async def one_by_one() -> None:
            await asyncio.sleep(0.5)  # once the flood holds every connection
            while time.monotonic() < deadline:
                began = time.monotonic()
                assert await call(quiet) == 200
                times.append(time.monotonic() - began)
                await asyncio.sleep(0.1)

        await asyncio.gather(one_by_one(), *(flood(t) for t in busy for _ in range(CALLS)))
    return answered, times


def test_a_tenant_called_now_and_then_is_answered_while_the_others_are_called_without_pause(
    tenants: Tenants,
) -> None:
    # Before, the busy tenants' connections went from one of their calls to the next and never
    # came free: the quiet tenant's call waited for the flood to end (its p99 was 15 s in
    # bench/serve_connections.py). Now a connection that comes back while a tenant with none
    # has waited 0.1 s is closed for it.
    with _serving(tenants) as (base, lines), Sampler(tenants.held) as sampler:
        flooded, times = asyncio.run(_flood_and_call(base))
    output = "".join(lines)
    # the quiet tenant had its turns all along: many calls within the flood, not one at its end
    assert len(times) >= 5, (times, flooded, output[-2_000:])
    assert max(sampler.samples, default=0) <= BUDGET
    print(f"flood: {flooded} calls; the quiet tenant's {len(times)} calls: {sorted(times)}")
