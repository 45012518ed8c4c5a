"""What a uniqueness window or a debounce costs an enqueue: producers enqueue realistic inputs
(a customer or document id, an email, a note) through `open_async_client`, one job per call, into
one PostgreSQL database (or SQLite), for a plain job, the same job under a unique window keyed by
customer, and under a debounce keyed by document.

    python3 bench/window_bench.py                       # PostgreSQL, 4 producers, 3 rounds
    python3 bench/window_bench.py --backend sqlite --producers 1

Each round enqueues `--jobs` jobs per kind, the kinds interleaved round by round; the keys are
drawn from `--keys` distinct values, so that some enqueues join an earlier job (the window's
holder, the pending debounced job) as in use, and each producer races the others on the same
keys. Prints the median enqueues a second per kind and the ratio to the plain job's in the same
round. PostgreSQL: a database `ketbench_windows` on KET_BENCH_POSTGRES_URL's server (default
postgresql://root@127.0.0.1:5432/postgres), made afresh each run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import psycopg

from ket import define_deployment, define_job, define_module
from ket.client import AsyncClient, open_async_client
from ket.store.sql import SqlStore

PG_URL = os.environ.get("KET_BENCH_POSTGRES_URL", "postgresql://root@127.0.0.1:5432/postgres")
INPUT = {"customer_id": "id", "document_id": "id", "email": "string", "note": "string"}


def _noop(ctx: object, input: object) -> None:
    pass


bench = define_module(
    name="bench",
    jobs={
        "plain": define_job(input=INPUT, idempotent=True, handler=_noop),
        "unique": define_job(
            input=INPUT,
            idempotent=True,
            unique={"period": "1h", "key": ["customer_id"]},
            handler=_noop,
        ),
        "debounce": define_job(
            input=INPUT,
            idempotent=True,
            debounce={"period": "1h", "key": ["document_id"]},
            handler=_noop,
        ),
    },
)
DEPLOYMENT = define_deployment(name="bench", modules=[bench])
KINDS = ("plain", "unique", "debounce")


def _database(backend: str, folder: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / 'windows.db'}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS ketbench_windows")
        admin.execute("CREATE DATABASE ketbench_windows")
    return PG_URL.rsplit("/", 1)[0] + "/ketbench_windows"


async def _round(url: str, kind: str, jobs: int, producers: int, keys: int, seed: int) -> float:
    """Enqueues a second of `jobs` jobs of `kind` by `producers` clients at once."""
    clients = [await open_async_client(DEPLOYMENT, database_url=url) for _ in range(producers)]
    rng = random.Random(seed)
    inputs = [
        {
            "customer_id": f"cus_{seed}_{rng.randrange(keys):06d}",  # a round's own keys
            "document_id": f"doc_{seed}_{rng.randrange(keys):06d}",
            "email": f"user{n}@example.com",
            "note": "order confirmed; send the receipt and the invoice",
        }
        for n in range(jobs)
    ]
    share = [inputs[n::producers] for n in range(producers)]
    try:
        began = time.perf_counter()
        await asyncio.gather(
            *[
                _produce(client, f"bench.{kind}", mine)
                for client, mine in zip(clients, share, strict=True)
            ]
        )
        return jobs / (time.perf_counter() - began)
    finally:
        for client in clients:
            await client.aclose()


async def _produce(client: AsyncClient, name: str, inputs: list[dict[str, str]]) -> None:
    for payload in inputs:
        await client.aenqueue(name, payload)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["postgresql", "sqlite"], default="postgresql")
    parser.add_argument("--jobs", type=int, default=2_000, help="jobs per kind and round")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--keys", type=int, default=500, help="distinct key values")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = _database(args.backend, Path(folder))
        store = await SqlStore.open(url, migrate=True)
        await store.close()
        rates: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for number in range(args.rounds):
            for kind in KINDS:
                rate = await _round(url, kind, args.jobs, args.producers, args.keys, number)
                rates[kind].append(rate)
        print(
            f"{args.backend}, {args.producers} producers, {args.jobs} jobs per kind and round, "
            f"{args.keys} keys, {args.rounds} rounds (medians)"
        )
        plain = statistics.median(rates["plain"])
        for kind in KINDS:
            median = statistics.median(rates[kind])
            print(f"  {kind:<9} {median:8.0f} enqueues/s  {median / plain:5.2f}x plain")


if __name__ == "__main__":
    asyncio.run(main())
