"""ket and PgQueuer side by side, in one run, by the method of bench-method.md.

    python3 -m pip install -e '.[bench]'
    python3 bench/compare/run.py                      # 10,000 jobs, 3 interleaved rounds
    python3 bench/compare/run.py --quick              # smoke: 500 jobs, 1 round, 30 probes
    python3 bench/compare/run.py --json results.json  # also the raw results

Every run gets a fresh database (KET_CMP_ADMIN_URL, default the local `postgres` database as
`root`), installed by the library's own installer; the workers are the libraries' own CLIs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from drain import drain
from enqueue import enqueue_bulk, enqueue_concurrent, enqueue_single
from environment import describe
from ket_side import KetSide
from latency import latency
from limit import pgbench_limit
from peer_side import PeerSide
from procfs import load_average
from report import limit_line, loads, table
from result import Latency, Pass
from side import Side
from sqlite_latency import sqlite_latency

# concurrent producers in one process (a web app's requests), and pgbench's clients for the limit
PRODUCERS = (8, 32)
CLIENTS = (1, *PRODUCERS)


@dataclass(frozen=True, kw_only=True)
class Settings:
    jobs: int
    rounds: int
    probes: int
    poll_s: float


def _settings(argv: list[str] | None) -> tuple[Settings, Path | None]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per measure (10,000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    parser.add_argument("--probes", type=int, default=200, help="latency probes (200)")
    parser.add_argument("--quick", action="store_true", help="500 jobs, 1 round, 30 probes")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the raw results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.rounds, args.probes = 500, 1, 30
    if args.jobs < 1 or args.rounds < 1 or args.probes < 2:
        parser.error("--jobs and --rounds must be at least 1, --probes at least 2")
    # the method polls every 100 ms, and every 1 s from 200,000 jobs on
    poll_s = 1.0 if args.jobs >= 200_000 else 0.1
    settings = Settings(jobs=args.jobs, rounds=args.rounds, probes=args.probes, poll_s=poll_s)
    return settings, args.json


async def _pass(side: Side, folder: Path, settings: Settings, round: int) -> Pass:
    def say(what: str) -> None:
        print(f"round {round} {side.name}: {what}", file=sys.stderr, flush=True)

    before = load_average()
    say(f"load {before:.2f}; enqueue one at a time")
    single = await enqueue_single(side, folder, settings.jobs)
    concurrent: dict[str, float] = {}
    for producers in PRODUCERS:
        say(f"{single:,.0f} jobs/s; enqueue one at a time from {producers} producers")
        rate = await enqueue_concurrent(side, folder, settings.jobs, producers)
        concurrent[str(producers)] = rate
        say(f"{rate:,.0f} jobs/s")
    say("enqueue in bulk")
    bulk = await enqueue_bulk(side, folder, settings.jobs)
    say(f"{bulk:,.0f} jobs/s; drain, default settings")
    default = await drain(side, folder, settings.jobs, best=False, poll_s=settings.poll_s)
    say(f"{default.rate:,.0f} jobs/s; drain, {side.best_label}")
    best = await drain(side, folder, settings.jobs, best=True, poll_s=settings.poll_s)
    say(f"{best.rate:,.0f} jobs/s; latency")
    probed = await latency(side, folder, settings.probes)
    say(f"p50 {probed.p50_ms:.1f} ms, p99 {probed.p99_ms:.1f} ms")
    embedded: Latency | None = None
    if side.name == KetSide.name:  # PgQueuer has no SQLite
        say("latency on embedded SQLite, enqueued from this process")
        embedded = await sqlite_latency(folder, settings.probes)
        say(f"p50 {embedded.p50_ms:.1f} ms, p99 {embedded.p99_ms:.1f} ms")
    after = load_average()
    say(f"load {after:.2f}")
    return Pass(
        library=side.name,
        round=round,
        load_before=before,
        load_after=after,
        enqueue_single=single,
        enqueue_bulk=bulk,
        enqueue_concurrent=concurrent,
        drain_default=default,
        drain_best=best,
        latency=probed,
        sqlite_latency=embedded,
    )


async def _run(settings: Settings) -> tuple[list[Pass], list[dict[str, float]]]:
    """Each round's passes, and each round's pgbench limit by clients."""
    ket, peer = KetSide(), PeerSide()
    passes = []
    limits = []
    with tempfile.TemporaryDirectory(prefix="ket-cmp-") as folder:
        for round in range(1, settings.rounds + 1):
            limit = {str(clients): pgbench_limit(clients) for clients in CLIENTS}
            print(f"round {round} pgbench limit: {limit}", file=sys.stderr, flush=True)
            limits.append(limit)
            # interleaved: ket, peer, peer, ket, ket, peer, ...
            order: list[Side] = [ket, peer] if round % 2 else [peer, ket]
            for side in order:
                passes.append(await _pass(side, Path(folder), settings, round))
    return passes, limits


def main(argv: list[str] | None = None) -> None:
    settings, json_path = _settings(argv)
    # a SIGTERM unwinds like Ctrl-C, so workers are stopped and databases dropped
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    environment = describe()
    passes, limits = asyncio.run(_run(settings))
    print(
        f"\n{settings.jobs:,} no-op async jobs, an order as input, "
        f"{settings.rounds} round(s) interleaved, "
        f"{settings.probes} latency probes; median (min-max); {environment.line()}\n"
    )
    print(table(passes, [KetSide.name, PeerSide.name], settings.jobs))
    print(f"\n{limit_line(passes, limits, KetSide.name)}")
    print(f"best settings: ket {KetSide.best_label}; PgQueuer {PeerSide.best_label}")
    print(f"load average (1 min) before→after each pass: {loads(passes)}")
    if json_path is not None:
        raw = {
            "settings": asdict(settings),
            "environment": asdict(environment),
            "passes": [asdict(p) for p in passes],
            "pgbench_limits": limits,
        }
        json_path.write_text(json.dumps(raw, indent=2), encoding="utf-8")
        print(f"raw results: {json_path}")


if __name__ == "__main__":
    main()
