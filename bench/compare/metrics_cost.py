"""What `ket worker --metrics-port` costs per job: the same backlog drained by the same worker
CLI with metrics off and on, in interleaved rounds (off, on, on, off, ...), medians.

    python3 bench/compare/metrics_cost.py                  # 20,000 jobs, 3 rounds
    python3 bench/compare/metrics_cost.py --jobs 2000 --rounds 1

Each drain is measure 3 of bench-method.md (a fresh database, the backlog enqueued in bulk and
ANALYZEd, `ket worker` with default settings, CPU of the worker pid over the drain window); with
metrics on the worker also serves /metrics on a free port and reads job stats every 15 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from database import Database
from drain import drain
from ket_side import KetSide
from procfs import load_average
from result import Drain
from side import Command


class KetWithMetrics(KetSide):
    """`ket worker --metrics-port 0`: metrics served on a port the system picks."""

    name = "ket-metrics"

    def worker(self, database: Database, folder: Path, *, best: bool) -> Command:
        command = super().worker(database, folder, best=best)
        return Command(argv=[*command.argv, "--metrics-port", "0"], env=command.env)


async def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    sides = {"off": KetSide(), "on": KetWithMetrics()}
    results: dict[str, list[Drain]] = {"off": [], "on": []}
    with tempfile.TemporaryDirectory(prefix="ket-metrics-cost-") as temporary:
        folder = Path(temporary)
        for number in range(args.rounds):
            order = ["off", "on"] if number % 2 == 0 else ["on", "off"]
            for which in order:
                load = load_average()
                result = await drain(sides[which], folder, args.jobs, best=False, poll_s=0.1)
                results[which].append(result)
                print(
                    f"round {number + 1} metrics {which:3}: "
                    f"{result.worker_cpu_ms_per_job * 1000:.1f} us worker CPU/job, "
                    f"{result.rate:,.0f} jobs/s (load {load:.2f} -> {load_average():.2f})",
                    flush=True,
                )
    for which, drains in results.items():
        cpu = [d.worker_cpu_ms_per_job * 1000 for d in drains]
        rate = [d.rate for d in drains]
        print(
            f"metrics {which:3}: worker CPU/job median {statistics.median(cpu):.1f} us "
            f"({min(cpu):.1f}-{max(cpu):.1f}), drain median {statistics.median(rate):,.0f} jobs/s "
            f"({min(rate):,.0f}-{max(rate):,.0f})"
        )
    off = statistics.median(d.worker_cpu_ms_per_job for d in results["off"]) * 1000
    on = statistics.median(d.worker_cpu_ms_per_job for d in results["on"]) * 1000
    print(f"difference of the medians: {on - off:+.1f} us per job ({(on - off) / off:+.1%})")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
