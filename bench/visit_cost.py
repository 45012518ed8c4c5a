"""What one safety visit costs the worker's process, in CPU, at a spent connection budget.

    python3 bench/tenants_bench.py --tenants 200 --setup-only   # the example app's databases
    python3 bench/visit_cost.py                                 # 200 tenants, a budget of 20
    python3 bench/visit_cost.py --tenants 1000 --budget 20 --rounds 3

Each round visits every tenant once, in turn, as a worker serving them does: with more tenants
than the budget holds connections, each visit sheds another tenant's idle connection and opens
one to its own database. It times, per visit, the process CPU (`time.process_time`) and the wall
time of two shapes of the visit's questions:

- `look`: the one statement a visit asks now (`SqlStore.look`);
- `questions`: the visit's questions before it, one statement each (`lease_end`, then the next
  due time of each queue; the visit also had each queue claim, which this leaves out).

The example app's queues (default, mail, maintenance); the databases are tenants_bench.py's
(`ketbench_ex_t0001` ...), reused as they are.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "tenants"))
sys.path.insert(0, str(HERE / "compare"))

from database import admin_url  # noqa: E402
from tenants_setup import PREFIX  # noqa: E402

QUEUES = ("default", "mail", "maintenance")


async def main(args: argparse.Namespace) -> None:
    from ket.cli.runtime import open_store
    from ket.connection import budget

    budget.install_per_server(args.budget)
    server = admin_url().rsplit("/", 1)[0]
    urls = [f"{server}/{PREFIX}ex_t{i:04d}" for i in range(1, args.tenants + 1)]
    stores = [await open_store(url) for url in urls]

    async def look() -> None:
        for store in stores:
            await store.look(QUEUES)

    async def questions() -> None:
        for store in stores:
            await store.lease_end()
            for queue in QUEUES:
                await store.wake_when_due(queue)

    shapes = {"look": look, "questions": questions}
    cpu: dict[str, list[float]] = {name: [] for name in shapes}
    wall: dict[str, list[float]] = {name: [] for name in shapes}
    try:
        await look()  # every store's first connection and prepared text, outside the rounds
        for _ in range(args.rounds):
            for name, shape in shapes.items():  # interleaved
                began_cpu, began = time.process_time(), time.perf_counter()
                await shape()
                cpu[name].append((time.process_time() - began_cpu) / len(stores) * 1000)
                wall[name].append((time.perf_counter() - began) / len(stores) * 1000)
    finally:
        for store in stores:
            await store.close()
    print(f"{len(stores)} tenants, budget {args.budget}, {args.rounds} rounds (medians):")
    for name in shapes:
        print(
            f"  {name:<10} CPU {statistics.median(cpu[name]):.2f} ms a visit, "
            f"wall {statistics.median(wall[name]):.2f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tenants", type=int, default=200)
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
