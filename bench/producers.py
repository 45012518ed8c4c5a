"""Enqueue one at a time from 1, 8 and 32 concurrent producers in one process, ket alone: the
compare harness's measure 1b (bench/compare/enqueue.py, an order as input, validated, each on a
fresh database), without the peer and the drains, so that a change to the enqueue path can be
measured in a minute. Rounds are interleaved (1, 8, 32; 32, 8, 1; ...); prints medians (min-max).

    python3 bench/producers.py                          # 10,000 jobs, 3 rounds, 1,8,32
    python3 bench/producers.py --producers 8 --rounds 5 --jobs 5000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "compare"))

from enqueue import enqueue_concurrent, enqueue_single
from ket_side import KetSide


async def _run(counts: list[int], jobs: int, rounds: int) -> dict[int, list[float]]:
    side = KetSide()
    rates: dict[int, list[float]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory(prefix="ket-producers-") as folder:
        for round in range(1, rounds + 1):
            for count in counts if round % 2 else counts[::-1]:
                if count == 1:
                    rate = await enqueue_single(side, Path(folder), jobs)
                else:
                    rate = await enqueue_concurrent(side, Path(folder), jobs, count)
                rates[count].append(rate)
                print(f"round {round}: {count} producer(s) {rate:,.0f} jobs/s", flush=True)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producers", default="1,8,32", help="comma-separated counts")
    args = parser.parse_args()
    counts = [int(count) for count in args.producers.split(",")]
    rates = asyncio.run(_run(counts, args.jobs, args.rounds))
    for count, found in rates.items():
        print(
            f"{count:>3} producer(s): {statistics.median(found):,.0f} jobs/s "
            f"({min(found):,.0f}-{max(found):,.0f})"
        )


if __name__ == "__main__":
    main()
