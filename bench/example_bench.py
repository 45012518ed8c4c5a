"""The example app under load: N orders placed, then one worker (the `erp` deployment's own queue
settings) runs their confirmation mails (a row read + an .eml written per job) and invoices.

    python bench/example_bench.py                     # both backends, 1,000 orders, 3 runs
    python bench/example_bench.py --backend sqlite --orders 200 --runs 1

Prints jobs/s from the first claim to the last completion, median of --runs runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

from ket.catalog import Catalog
from ket.runtime.call import call_function
from ket.runtime.contexts import Contexts
from ket.runtime.worker import TenantWorker
from ket.store.clock import ManualClock
from ket.store.sql import SqlStore
from ket.transport import DevSender
from ket.workspace import load_deployment

PG_URL = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")


async def one_run(url: str, args: dict[str, str], folder: Path, orders: int) -> float:
    catalog = Catalog.build(load_deployment("modules_example/workspace.py", "erp"))
    clock = ManualClock()
    store = await SqlStore.open(url, clock=clock, migrate=True, connect_args=args)
    await store.record_install(list(catalog.models.values()))
    sender = DevSender(folder / "outbox")
    contexts = Contexts(
        store=store,
        catalog=catalog,
        tenant="bench",
        sender=sender,
        storage_root=folder / "storage",
        clock=clock.now,
    )
    for n in range(orders):
        await call_function(
            catalog, contexts, "sales.place_order", {"number": f"{n}", "email": f"c{n}@example.com"}
        )
    clock.advance(minutes=6)  # the invoices are due too: 2 jobs per order
    expected = 2 * orders
    with ThreadPoolExecutor(8) as pool:
        worker = TenantWorker(
            store=store,
            catalog=catalog,
            tenant="bench",
            worker_id="bench",
            executor=pool,
            contexts=contexts,
        )
        started = time.perf_counter()
        worker.start()
        while True:
            stats = await store.job_stats()
            if sum(n for (s, _), n in stats.counts.items() if s == "completed") >= expected:
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - started
        await worker.stop()
    await store.close()
    return expected / elapsed


async def backend_rates(backend: str, orders: int, runs: int) -> list[float]:
    rates = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="ket-ebench-") as name:
            folder = Path(name)
            if backend == "sqlite":
                rates.append(await one_run(f"sqlite:///{folder / 'erp.db'}", {}, folder, orders))
                continue
            schema = f"ket_ebench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_URL, autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {schema}")
            try:
                args = {"options": f"-c search_path={schema}"}
                rates.append(await one_run(PG_URL, args, folder, orders))
            finally:
                with psycopg.connect(PG_URL, autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")
    return rates


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--backend", choices=["postgresql", "sqlite", "both"], default="both")
    parser.add_argument("--orders", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    for backend in backends:
        rates = await backend_rates(backend, args.orders, args.runs)
        print(
            f"{backend}: example app, {2 * args.orders:,} jobs (mail + invoice per order): "
            f"{statistics.median(rates):,.0f} jobs/s (median of {args.runs})"
        )


if __name__ == "__main__":
    asyncio.run(main())
