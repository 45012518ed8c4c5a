"""What fleet-wide limits cost ket's drain: the compare harness's drain of a backlog, ket
against ket, with and without limits, interleaved in one run.

    python3 bench/compare/limits_cost.py                 # 10,000 jobs, 5 rounds
    python3 bench/compare/limits_cost.py --kinds none,declared,reached --rounds 3
    python3 bench/compare/limits_cost.py --kinds none,declared,concurrency --settings default

Kinds (ket_app.py, KET_CMP_LIMITS): `none`, `declared` (at most 10 running per order and a
million starts a second: never reached), `concurrency` (the first of those alone) and `reached`
(at most 4 running at once). Each round
drains a fresh backlog once per kind, the order turning each round (none, declared; declared,
none; ...), with ket's default worker settings and with its best ones. Prints the medians, and
each kind's ratio to `none` in the same run: the cost of its limits, as the ratio of the medians
and as the median of each round's ratio to its own `none` (on a shared machine the drain's
speed drifts by a fifth between rounds: read at least seven). The drain, its database
and its checks are run.py's (drain.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

from drain import drain
from environment import describe
from ket_side import KetSide


async def _run(kinds: list[str], jobs: int, rounds: int, best: bool) -> dict[str, list[float]]:
    side = KetSide()
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="ket-limits-") as folder:
        for round in range(1, rounds + 1):
            order = kinds if round % 2 else kinds[::-1]
            for kind in order:
                # read by ket_app.deployment here (the producer) and in the worker it starts
                os.environ["KET_CMP_LIMITS"] = "" if kind == "none" else kind
                result = await drain(side, Path(folder), jobs, best=best, poll_s=0.1)
                rates[kind].append(result.rate)
                print(
                    f"round {round} {kind} {'best' if best else 'default'}: "
                    f"{result.rate:,.0f} jobs/s, worker CPU {result.worker_cpu_ms_per_job:.3f} "
                    "ms/job",
                    file=sys.stderr,
                    flush=True,
                )
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kinds", default="none,declared")
    parser.add_argument(
        "--settings", choices=("default", "best", "both"), default="both", help="worker settings"
    )
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    if kinds[0] != "none" or not set(kinds) <= {"none", "declared", "concurrency", "reached"}:
        parser.error("--kinds: none first, then any of declared, concurrency and reached")
    print(f"{args.jobs:,} jobs, {args.rounds} rounds interleaved; {describe().line()}")
    for best in {"default": (False,), "best": (True,), "both": (False, True)}[args.settings]:
        rates = asyncio.run(_run(kinds, args.jobs, args.rounds, best))
        base = statistics.median(rates["none"])
        label = KetSide.best_label if best else "default settings"
        for kind in kinds:
            rate = statistics.median(rates[kind])
            low, high = min(rates[kind]), max(rates[kind])
            # each round's ratio to its own `none`: the machine's drift between rounds cancels
            paired = statistics.median(
                mine / none for mine, none in zip(rates[kind], rates["none"], strict=True)
            )
            print(
                f"  drain, {label:<16} {kind:<11} {rate:7,.0f} jobs/s ({low:,.0f}-{high:,.0f})"
                f"  {rate / base:5.2f}x none, {paired:5.2f}x round by round"
            )


if __name__ == "__main__":
    main()
