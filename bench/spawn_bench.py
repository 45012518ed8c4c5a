"""Spawn to first completed job, and peak RSS, of `ket worker` on PostgreSQL (bench-method.md).

    python3 bench/spawn_bench.py                          # this tree, 5 runs
    python3 bench/spawn_bench.py --rounds 7 /work/main .  # two trees, interleaved (A, B, B, A, ...)

Each tree gets a fresh database (`ket migrate` of that tree) and the bench app of bench/compare
(one no-op async job, default settings, no models). Each run queues one job with plain SQL, starts
`python3 -m ket.cli.main worker` from the tree, and takes the time from just before `Popen` to the
job's completion (a COUNT polled every 2 ms), then the worker's `VmHWM` half a second later. It
prints every run, the median (min-max) per tree and the 1-minute load average before and after.
PostgreSQL is reached through `KET_CMP_ADMIN_URL` (default postgresql://root@127.0.0.1:5432/postgres).
Never read a single run, and never turn a figure into a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

HERE = Path(__file__).resolve().parent
ADMIN = os.environ.get("KET_CMP_ADMIN_URL", "postgresql://root@127.0.0.1:5432/postgres")
WORKSPACE = "from ket_app import deployment\n\nbench = deployment(None)\n"
INSERT = (
    "INSERT INTO ket_jobs (name, queue, state, priority, payload, payload_version, attempt, "
    "max_attempts, run_at, enqueued_at, fence, cancel_requested) VALUES "
    "('b.noop', 'default', 'available', 0, '{}', 1, 0, 20, now(), now(), 0, false)"
)


class Tree:
    """One source tree of ket, its database and its project folder."""

    def __init__(self, root: Path, folder: Path) -> None:
        self.root = root
        self.name = f"ket_spawn_{uuid.uuid4().hex[:8]}"
        self.url = ADMIN.rsplit("/", 1)[0] + f"/{self.name}"
        self.folder = folder
        folder.mkdir(parents=True)
        (folder / "workspace_bench.py").write_text(WORKSPACE)
        self.runs: list[tuple[float, float]] = []

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KET_")}
        env.update(
            KET_DATABASE_URL=self.url,
            KET_REGISTRY_URL=f"sqlite:///{self.folder / 'registry.db'}",
            PYTHONPATH=f"{self.root / 'framework'}:{HERE / 'compare'}",
        )
        return env

    def ket(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "ket.cli.main", *args, "--workspace", "workspace_bench.py"]

    def create(self) -> None:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.name)))
        subprocess.run(
            self.ket("migrate"),
            env=self.environment(),
            cwd=self.folder,
            check=True,
            capture_output=True,
        )

    def drop(self) -> None:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(statement.format(sql.Identifier(self.name)))

    def run(self) -> tuple[float, float]:
        """One spawn: seconds to the first completed job, and peak RSS in MB."""
        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute("DELETE FROM ket_jobs")
            connection.execute(INSERT)
            started = time.perf_counter()
            worker = subprocess.Popen(
                self.ket("worker"),
                env=self.environment(),
                cwd=self.folder,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                while True:
                    done = "SELECT count(*) FROM ket_jobs WHERE state = 'completed'"
                    row = connection.execute(done).fetchone()
                    if row and row[0]:
                        break
                    if worker.poll() is not None:
                        raise RuntimeError(f"{self.root}: the worker exited ({worker.returncode})")
                    time.sleep(0.002)
                spawn = time.perf_counter() - started
                time.sleep(0.5)
                status = Path(f"/proc/{worker.pid}/status").read_text()
                kilobytes = next(
                    int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM")
                )
            finally:
                worker.terminate()
                worker.wait(timeout=30)
        result = (spawn, kilobytes / 1024)
        self.runs.append(result)
        return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[HERE.parent])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ket-spawn-") as scratch:
        trees = [Tree(root.resolve(), Path(scratch) / str(i)) for i, root in enumerate(args.trees)]
        load = os.getloadavg()[0]
        try:
            for tree in trees:
                tree.create()
            for number in range(args.rounds):
                order = trees if number % 2 == 0 else list(reversed(trees))
                for tree in order:
                    spawn, rss = tree.run()
                    print(f"{tree.root}: spawn {spawn:.3f} s, peak RSS {rss:.1f} MB", flush=True)
        finally:
            for tree in trees:
                tree.drop()
        print(f"1-minute load average: {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        for tree in trees:
            spawns = [s for s, _ in tree.runs]
            rss = [r for _, r in tree.runs]
            print(
                f"{tree.root}: spawn {statistics.median(spawns):.3f} s "
                f"({min(spawns):.3f}-{max(spawns):.3f}), peak RSS {statistics.median(rss):.1f} MB "
                f"({min(rss):.1f}-{max(rss):.1f}), {len(spawns)} runs"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
