"""Tenants on one worker process: identical job ids never cross, and a tenant whose database is
unreachable does not stop the others."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from ket import define_deployment, define_job, define_model, define_module
from ket.catalog import Catalog
from ket.runtime.fleet import Fleet
from ket.store import JobQuery, NewJob
from ket.store.sql import SqlStore
from ket.transport import CaptureSender

seen: list[tuple[str, int, int]] = []


async def record(ctx: Any, input: Any) -> None:
    seen.append((ctx.tenant, ctx.job.id, input.n))
    await ctx.db.insert("t.Note", {"n": input.n, "tenant": ctx.tenant})
    await ctx.storage.put(f"notes/{ctx.job.id}.txt", f"{ctx.tenant}:{input.n}")
    await ctx.transport.send(
        {
            "idempotency_key": f"note:{ctx.job.id}",
            "from": {"address": "app@example.com"},
            "to": [{"address": f"{ctx.tenant}@example.com"}],
            "subject": f"note {input.n}",
            "text": "hello",
        }
    )


module = define_module(
    name="t",
    models={"Note": define_model({"n": "int", "tenant": "string"})},
    jobs={
        "record": define_job(
            idempotent=True,
            input={"n": "int"},
            effects=["write:t.Note", "storage:write", "transport:send"],
            handler=record,
        )
    },
)
CATALOG = Catalog.build(
    define_deployment(
        name="t", modules=[module], worker={"queues": {"default": 3}, "poll_min_ms": 10}
    )
)


async def _prepare(url: str, numbers: list[int]) -> None:
    store = await SqlStore.open(url, migrate=True)
    try:
        await store.record_install(list(CATALOG.models.values()))
        await store.job_insert([NewJob(name="t.record", payload={"n": n}) for n in numbers])
    finally:
        await store.close()


async def _serve_until(fleet: Fleet, done: Any, timeout: float = 30) -> None:
    stop = asyncio.Event()
    running = asyncio.ensure_future(fleet.run(stop))
    deadline = time.monotonic() + timeout
    while not await done():
        if time.monotonic() > deadline:
            stop.set()
            await running
            raise AssertionError("the tenants' jobs did not finish in time")
        await asyncio.sleep(0.05)
    stop.set()
    await running


def test_two_tenants_with_identical_job_ids_never_see_each_other(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)  # storage goes under ./.ket/storage/<tenant>
    seen.clear()
    urls = {name: f"sqlite:///{tmp_path / name}.db" for name in ("acme", "globex")}
    sender = CaptureSender()

    async def scenario() -> None:
        await _prepare(urls["acme"], [1, 2, 3, 4, 5])
        await _prepare(urls["globex"], [101, 102, 103, 104, 105])

        async def tenants() -> dict[str, str | None]:
            return dict(urls)

        async def done() -> bool:
            finished = 0
            for url in urls.values():
                store = await SqlStore.open(url)
                records = await store.job_list(JobQuery(states=("completed",)))
                await store.close()
                finished += len(records)
            return finished == 10

        supervisor = Fleet(
            catalog=CATALOG,
            template="unused",
            list_tenants=tenants,
            open_store=SqlStore.open,
            worker_id="w",
            sender=sender,
        )
        await _serve_until(supervisor, done)

        for tenant, url, numbers in (
            ("acme", urls["acme"], {1, 2, 3, 4, 5}),
            ("globex", urls["globex"], {101, 102, 103, 104, 105}),
        ):
            store = await SqlStore.open(url)
            await store.record_install(list(CATALOG.models.values()))
            notes = await store.record_select("t.Note")
            await store.close()
            assert {(note["tenant"], note["n"]) for note in notes} == {(tenant, n) for n in numbers}

    asyncio.run(scenario())
    # the same ids ran once per tenant, each with its own tenant's payload
    assert sorted(seen) == sorted(
        [("acme", i, i) for i in range(1, 6)] + [("globex", i, 100 + i) for i in range(1, 6)]
    )
    for tenant, offset in (("acme", 0), ("globex", 100)):
        folder = tmp_path / ".ket" / "storage" / tenant / "notes"
        contents = {p.name: p.read_text() for p in folder.iterdir()}
        assert contents == {f"{i}.txt": f"{tenant}:{offset + i}" for i in range(1, 6)}
        assert {m["to"][0]["address"] for m in sender.sent_by(tenant)} == {f"{tenant}@example.com"}
        assert len(sender.sent_by(tenant)) == 5


def test_an_unreachable_tenant_database_does_not_stop_the_other_tenants(tmp_path: Path) -> None:
    seen.clear()
    good = f"sqlite:///{tmp_path / 'good.db'}"
    broken = "postgresql://nobody@127.0.0.1:1/nowhere?connect_timeout=1"

    async def scenario() -> None:
        await _prepare(good, [7, 8])

        async def tenants() -> dict[str, str | None]:
            return {"broken": broken, "good": good}

        async def done() -> bool:
            store = await SqlStore.open(good)
            records = await store.job_list(JobQuery(states=("completed",)))
            await store.close()
            return len(records) == 2

        supervisor = Fleet(
            catalog=CATALOG,
            template="unused",
            list_tenants=tenants,
            open_store=SqlStore.open,
            worker_id="w",
            sender=CaptureSender(),
        )
        await _serve_until(supervisor, done)
        assert "broken" not in supervisor.workers  # it failed to open and waits for a retry

    asyncio.run(scenario())
    assert sorted(n for _, _, n in seen) == [7, 8]
