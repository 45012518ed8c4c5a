"""Handlers waiting in `ctx.tx` for a connection, on a real `ket worker` whose budget leaves its
engines fewer connections than it runs handlers: each gets one of its own pool's idle
connections as the others commit, and none spends an attempt waiting, however long it waits.

Seen in issue 26: at `--max-connections 6` (engines may hold 4), 8 handlers in `ctx.tx`
waited for room while their own pool's connections sat idle, until their jobs timed out at
120 s and spent an attempt. And at `--max-connections 4` with 200 tenants, a mail job waited
for the engines' one connection past its 30 s timeout: a wait for room is the worker's, not the
handler's, and no longer counts against the job's timeout.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg

from ket import define_deployment, define_job, define_model, define_module
from ket.catalog import Catalog
from ket.store.sql import SqlStore
from tests.conftest import migrated_postgres_database
from tests.faults.fleet import until

BUDGET = 6  # engines may hold 4 of it (budget.RESERVED is the worker's own)
HANDLERS = 8
JOBS = 24

APP = """
import asyncio, time
from ket import define_deployment, define_job, define_model, define_module

async def hold(ctx, input):
    async def body(tx):
        await tx.db.insert("app.Mark", {"n": input.n})
        await asyncio.sleep(0.3)  # the handler's own work, inside its transaction
    await ctx.tx(body)

def hold_plain(ctx, input):  # the same, as a plain handler in a thread of its own
    def body(tx):
        tx.db.insert("app.Mark", {"n": input.n})
        time.sleep(0.3)
    ctx.tx(body)

app = define_module(
    name="app",
    models={"Mark": define_model({"n": "int"})},
    jobs={
        "hold": define_job(
            input={"n": "int"}, effects=["write:app.Mark"], idempotent=True,
            timeout_ms=TIMEOUT, handler=hold,
        ),
        "hold_plain": define_job(
            input={"n": "int"}, effects=["write:app.Mark"], idempotent=True,
            timeout_ms=TIMEOUT, handler=hold_plain,
        ),
    },
)
main = define_deployment(
    name="main", modules=[app],
    worker={"queues": {"default": HANDLERS}, "poll_min_ms": 20, "poll_max_ms": 200},
)
"""


async def _unused(ctx: object, input: object) -> None:
    raise AssertionError("the worker runs it")


DEPLOYMENT = define_deployment(
    name="main",
    modules=[
        define_module(
            name="app",
            models={"Mark": define_model({"n": "int"})},
            jobs={
                name: define_job(
                    input={"n": "int"},
                    effects=["write:app.Mark"],
                    idempotent=True,
                    handler=_unused,
                )
                for name in ("hold", "hold_plain")
            },
        )
    ],
    worker={"queues": {"default": HANDLERS}},
)


def _jobs(url: str) -> list[tuple[str, int]]:
    with psycopg.connect(url) as connection:
        rows = connection.execute("SELECT state, attempt FROM ket_jobs ORDER BY id").fetchall()
    return [(row[0], row[1]) for row in rows]


def test_more_handlers_in_ctx_tx_than_the_engines_share_all_finish_at_their_first_attempt(
    postgres_url: str, tmp_path: Path
) -> None:
    # each job holds its transaction 0.3 s: about a second for all of them. Before, 4 of the
    # first 8 waited until their 20 s timeout, and so on
    _run_jobs(postgres_url, tmp_path, budget=BUDGET, timeout_ms=20_000)


def test_a_handlers_wait_for_room_does_not_count_against_its_timeout(
    postgres_url: str, tmp_path: Path
) -> None:
    # At a budget of 4 the engines have one connection (the worker keeps 2, the listener has
    # one): 8 handlers (async ones and plain ones in threads) take turns in it, 0.3 s each, so
    # most wait longer than their 1 s timeout before their transaction starts. Before, they
    # timed out and spent an attempt (a retry backs off, and a mail job's retry then waits for
    # its sent-ledger claim to go stale).
    _run_jobs(postgres_url, tmp_path, budget=4, timeout_ms=1_000)


def _run_jobs(postgres_url: str, tmp_path: Path, *, budget: int, timeout_ms: int) -> None:
    app = APP.replace("HANDLERS", str(HANDLERS)).replace("TIMEOUT", str(timeout_ms))
    (tmp_path / "app.py").write_text(textwrap.dedent(app))
    (tmp_path / "pyproject.toml").write_text('[tool.ket]\nworkspace = "app.py"\n')
    with migrated_postgres_database(postgres_url, "ket_tx_budget") as url:

        async def enqueue() -> None:
            catalog = Catalog.build(DEPLOYMENT)
            store = await SqlStore.open(url)
            try:
                await store.job_insert(
                    [
                        catalog.new_job("app.hold_plain" if n % 2 else "app.hold", {"n": n})
                        for n in range(JOBS)
                    ]
                )
            finally:
                await store.close()

        asyncio.run(enqueue())
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=url,
            KET_REGISTRY_URL=f"sqlite:///{tmp_path / 'registry.db'}",
            PYTHONUNBUFFERED="1",
        )
        log = tmp_path / "worker.log"
        with log.open("w") as sink:
            worker = subprocess.Popen(
                [sys.executable, "-m", "ket.cli.main", "worker", "--max-connections", str(budget)],
                cwd=tmp_path,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            until(
                lambda: all(state == "completed" for state, _ in _jobs(url)),
                60,
                "every job to complete",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
        text = log.read_text()
        assert code == 0, text[-3000:]
        assert _jobs(url) == [("completed", 1)] * JOBS, text[-3000:]
        assert "timed out" not in text, text[-3000:]
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT count(*) FROM m_app_mark").fetchone()
        assert row is not None and row[0] == JOBS
